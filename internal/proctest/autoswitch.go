package proctest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
)

// StartAutoSwitch starts `replicator ROLE --ha-protocol autoswitch` (role
// "master" or "slave") with data in dir on free ports and waits until it is
// ready. Both roles get an HA listen address (p.HA): a master serves on
// it, a slave opens it when promoted. A slave follows masterHA (its
// metadata from masterAPI); both reconnect after 100 ms. extra flags
// follow the defaults and win.
func StartAutoSwitch(t testing.TB, bin, role, dir, masterHA, masterAPI string, extra ...string) *Proc {
	t.Helper()
	return startOnFreePorts(t, 2, func(pp []string) *Proc {
		args := []string{"--log-level", "info", role, "--ha-protocol", "autoswitch", "--data", dir, "--listen", pp[0], "--ha-listen", pp[1],
			"--segment-size", "1MiB", "--reconnect-delay", "100ms"}
		if role == "slave" {
			args = append(args, "--master", masterHA, "--master-api", masterAPI, "--metadata-interval", "1s")
		}
		p := Start(t, bin, role, append(args, extra...)...)
		p.API, p.HA = "http://"+pp[0], pp[1]
		return p
	})
}

// Role sends POST /v1/role and returns the node's new status.
func (c *Client) Role(ctx context.Context, req api.RoleRequest) (api.Status, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return api.Status{}, err
	}
	var st api.Status
	err = c.do(ctx, http.MethodPost, "/v1/role", b, &st)
	return st, err
}

// WaitStatus polls the node's status until cond returns nil (or the test
// fails after timeout) and returns the last status.
func (c *Client) WaitStatus(t testing.TB, what string, timeout time.Duration, cond func(api.Status) error) api.Status {
	t.Helper()
	var st api.Status
	Eventually(t, what, timeout, func() error {
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if st, err = c.Status(ctx); err != nil {
			return err
		}
		return cond(st)
	})
	return st
}

// SameMaxOffset returns nil when every node's max offset is the same, else
// an error naming them.
func SameMaxOffset(ctx context.Context, cs ...*Client) error {
	var first int64
	for i, c := range cs {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if i == 0 {
			first = st.MaxOffset
		} else if st.MaxOffset != first {
			return fmt.Errorf("%s has max offset %d, %s %d", cs[0].Base, first, c.Base, st.MaxOffset)
		}
	}
	return nil
}
