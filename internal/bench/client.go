package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/replicatorhq/replicator/client"
)

// clientCluster is an apiCluster whose producers share one client.Producer
// (the producer stream): their concurrent sends leave in batches.
type clientCluster struct {
	*apiCluster
	p    *client.Producer
	msgs []client.Message // one per producer, reused (one send at a time each)
}

func (r *runner) newClientCluster(ctx context.Context, kind, dir, replication string, seg int64, producers int) (*clientCluster, error) {
	ac, err := r.newAPICluster(ctx, kind, dir, replication, seg, producers)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, childStartTimeout)
	defer cancel()
	p, err := client.Dial(dctx, []string{ac.master.api})
	if err != nil {
		ac.close()
		return nil, fmt.Errorf("dialing the master's producer stream: %w", err)
	}
	c := &clientCluster{apiCluster: ac, p: p, msgs: make([]client.Message, producers)}
	for i := range c.msgs {
		c.msgs[i] = client.Message{Topic: "TopicBench", QueueID: int32(i % queues), Body: ac.body}
	}
	return c, nil
}

func (c *clientCluster) put(ctx context.Context, p int) (int64, bool, error) {
	res, err := c.p.Send(ctx, &c.msgs[p])
	if err != nil {
		select {
		case <-c.master.Done():
			return 0, false, c.master.Exited()
		default:
		}
		return 0, false, err
	}
	return res.NextOffset, res.Status == client.PutOK, nil
}

func (c *clientCluster) waitSlave(ctx context.Context, next int64) (time.Time, error) {
	return c.apiCluster.waitSlave(ctx, next)
}

func (c *clientCluster) close() error {
	c.p.Close()
	return c.apiCluster.close()
}
