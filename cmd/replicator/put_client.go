package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	producer "github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
)

// producerOptions are the client options of the --ca, --cert/--cert-key
// and --token-file (or $REPLICATOR_API_TOKEN) options of a client command
// for the nodes at apiURLs (comma-separated).
func (e *env) producerOptions(sec clientSecurity, apiURLs string) ([]producer.Option, error) {
	var opts []producer.Option
	addrs := strings.Split(apiURLs, ",")
	if sec.CA != "" || sec.Cert != "" || sec.Key != "" {
		tlsCfg, err := node.ClientTLS(sec.CA, sec.Cert, sec.Key, "")
		if err != nil {
			return nil, fmt.Errorf("--ca/--cert/--cert-key: %w", err)
		}
		for _, a := range addrs {
			if strings.HasPrefix(a, "http://") {
				return nil, fmt.Errorf("--ca, --cert and --cert-key need an https:// URL (not %s)", a)
			}
		}
		opts = append(opts, producer.WithTLS(tlsCfg))
	} else {
		for _, a := range addrs {
			if strings.HasPrefix(a, "https://") {
				opts = append(opts, producer.WithTLS(&tls.Config{}))
				break
			}
		}
	}
	tok, err := e.apiToken(sec.TokenFile, "--token-file")
	if err != nil {
		return nil, err
	}
	if tok != "" {
		opts = append(opts, producer.WithToken(tok))
	}
	return opts, nil
}

// runPutClient is `replicator put`: the messages go through the producer
// stream (package client), --in-flight at a time; results print in the
// order of the messages.
func runPutClient(ctx context.Context, e *env) int {
	o := &e.opts.put
	opts, err := e.producerOptions(o.sec, o.API)
	if err != nil {
		return e.failErr("put", usage(err))
	}
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	p, err := dialUntil(dctx, e.log, strings.Split(o.API, ","), append(opts, producer.WithRetryTimeout(o.Timeout), producer.WithFollowMaster(!o.NoFollow))...)
	cancel()
	if err != nil {
		return e.failErr("put", err)
	}
	defer p.Close()
	props := map[string]string{}
	for _, kv := range o.Properties {
		k, v, _ := strings.Cut(kv, "=")
		props[k] = v
	}
	code := exitOK
	var window []*producer.Future // in flight, oldest first
	n := 0
	report := func() {
		f := window[0]
		window = window[1:]
		n++
		res, err := f.Result()
		switch {
		case err != nil:
			e.fail("put: message %d: %v", n, err)
			code = exitError
		default:
			fmt.Fprintf(e.stdout, "%s offset=%d next_offset=%d queue_offset=%d", res.Status, res.Offset, res.NextOffset, res.QueueOffset)
			if res.Epoch != 0 {
				// An autoswitch or controller-mode master: the epoch and
				// the node that acknowledged it (the JSON answer's fields).
				fmt.Fprintf(e.stdout, " epoch=%d broker_id=%d", res.Epoch, res.BrokerID)
			}
			fmt.Fprintln(e.stdout)
			if res.Status != producer.PutOK && code == exitOK {
				code = exitNotPutOK
			}
		}
	}
	send := func(body []byte) {
		if len(window) >= o.InFlight {
			report()
		}
		window = append(window, p.SendAsync(&producer.Message{Topic: o.Topic, QueueID: int32(o.Queue), Body: body, Tags: o.Tag, Keys: o.Key, Properties: props}))
	}
	var readErr error
	skipped := 0
	if len(e.args) > 0 {
		for _, a := range e.args {
			send([]byte(a))
		}
	} else {
		sc := bufio.NewScanner(e.stdin)
		sc.Buffer(make([]byte, 64<<10), 256<<20)
		for sc.Scan() && ctx.Err() == nil {
			line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
			if len(line) == 0 {
				skipped++ // a message needs a body: said once at the end
				continue
			}
			send(append([]byte(nil), line...))
		}
		readErr = sc.Err()
	}
	for len(window) > 0 {
		report()
	}
	if skipped > 0 {
		fmt.Fprintf(e.stderr, "replicator: put: skipped %d empty line(s) of standard input: a message needs a body\n", skipped)
	}
	if readErr != nil {
		return e.fail("put: reading standard input: %v", readErr)
	}
	return code
}

// urlList is put's --api: one or more comma-separated base URLs, each
// checked and normalised as config.URL does, kept comma-joined.
type urlList struct{ p *string }

func (v urlList) Set(s string) error {
	var out []string
	for _, it := range strings.Split(s, ",") {
		if it = strings.TrimSpace(it); it == "" {
			continue
		}
		u, err := config.NormalizeURL(it)
		if err != nil {
			return err
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return errors.New("no URL (want http://host:port[,http://host:port...])")
	}
	*v.p = strings.Join(out, ",")
	return nil
}

func (v urlList) String() string { return *v.p }

// dialRetryEvery is the pause between dials while no node accepts a
// connection.
const dialRetryEvery = 100 * time.Millisecond

// dialUntil dials addrs again while every one refuses the connection
// (producer.ErrNoListener: nodes that are still starting) until ctx ends,
// as --timeout promises; any other error (TLS, a bad address) returns at
// once, and so does the last refusal when ctx ends.
func dialUntil(ctx context.Context, log hclog.Logger, addrs []string, opts ...producer.Option) (*producer.Producer, error) {
	for {
		p, err := producer.Dial(ctx, addrs, opts...)
		if err == nil || !errors.Is(err, producer.ErrNoListener) {
			return p, err
		}
		log.Debug("no node listens yet; dialing again", "nodes", strings.Join(addrs, ","), "in", dialRetryEvery, "error", err)
		t := time.NewTimer(dialRetryEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}
