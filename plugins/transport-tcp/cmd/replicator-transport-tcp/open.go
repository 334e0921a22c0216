package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/transportplugin"
	"github.com/replicatorhq/replicator/transport"
)

// open is the plugin's transportplugin.Opener.
func open(_ context.Context, req transportplugin.OpenRequest) (transport.Transport, error) {
	o := tcptransport.DefaultOptions()
	o.Logger = req.Logger
	for k, v := range req.Options {
		var err error
		switch k {
		case "connect_timeout":
			o.ConnectTimeout, err = time.ParseDuration(v)
		case "keepalive":
			o.KeepAlive, err = time.ParseDuration(v)
		case "no_delay":
			var b bool
			b, err = strconv.ParseBool(v)
			o.DisableNoDelay = !b
		case "send_buffer":
			o.SendBufferSize, err = strconv.Atoi(v)
		case "receive_buffer":
			o.ReceiveBufferSize, err = strconv.Atoi(v)
		case "allow":
			o.Allow, err = tcptransport.ParseAllow(strings.Split(v, ","))
		default:
			err = fmt.Errorf("unknown option")
		}
		if err != nil {
			return nil, fmt.Errorf("tcp transport plugin: option %s=%q: %w", k, v, err)
		}
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("tcp transport plugin: %w", err)
	}
	return tcptransport.New(o), nil
}
