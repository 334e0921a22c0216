package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// helperEnv makes the test binary a helper process of BenchmarkClientHop
// (TestMain): "echo" serves an 8-byte TCP echo and a bare gRPC bidi
// stream that answers each message with 32 bytes, "node" an ASYNC_MASTER
// node (data in $REPLICATOR_CLIENT_HELPER_DIR). The helper prints its
// addresses on stdout and ends when its stdin closes.
const helperEnv = "REPLICATOR_CLIENT_HELPER"

func runHelper(mode string) int {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	switch mode {
	case "echo":
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			for {
				c, err := tl.Accept()
				if err != nil {
					return
				}
				go func() {
					var b [8]byte
					for {
						if _, err := io.ReadFull(c, b[:]); err != nil {
							return
						}
						if _, err := c.Write(b[:]); err != nil {
							return
						}
					}
				}()
			}
		}()
		gl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		gs := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}))
		gs.RegisterService(&pingDesc, nil)
		go gs.Serve(gl)
		fmt.Printf("%s %s\n", tl.Addr(), gl.Addr())
		<-ctx.Done()
		gs.Stop()
		tl.Close()
		return 0
	case "node":
		n, err := node.New(node.Config{Role: core.AsyncMaster, DataDir: os.Getenv(helperEnv + "_DIR"), Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0",
			Registry: pluginhost.Builtin(), SegmentSize: 64 << 20, Version: "bench"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		select {
		case <-n.Ready():
		case err := <-done:
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(n.URL())
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper", mode)
	return 1
}

// rawCodec passes []byte through (the bare stream's messages).
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

var pingDesc = grpc.ServiceDesc{
	ServiceName: "bench.Ping",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName: "Ping", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			out := make([]byte, 32)
			for {
				var in []byte
				if err := stream.RecvMsg(&in); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := stream.SendMsg(&out); err != nil {
					return err
				}
			}
		},
	}},
}

// startHelper runs this test binary as a helper process and returns the
// line it printed.
func startHelper(b *testing.B, mode string) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperEnv+"_DIR="+filepath.Join(b.TempDir(), "data"))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("helper %s: %v", mode, err)
	}
	return strings.TrimSpace(line)
}

// BenchmarkClientHop measures, in one run and alternating in blocks of
// 200, three round trips from this process to helper processes on
// loopback: an 8-byte TCP echo, a bare gRPC bidi stream (1 KiB up, 32
// bytes down, no protobuf), and one producer's Send of 1 KiB to an
// ASYNC_MASTER node (the client hop: the stream both ways and the
// append). It reports each p50 and the ratios: the client hop against the
// bare stream is what the client and the stream server cost beyond gRPC's
// own transport.
func BenchmarkClientHop(b *testing.B) {
	addrs := strings.Fields(startHelper(b, "echo"))
	nodeURL := startHelper(b, "node")
	tc, err := net.Dial("tcp", addrs[0])
	if err != nil {
		b.Fatal(err)
	}
	defer tc.Close()
	cc, err := grpc.NewClient("passthrough:///"+addrs[1], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gst, err := cc.NewStream(ctx, &pingDesc.Streams[0], "/bench.Ping/Ping")
	if err != nil {
		b.Fatal(err)
	}
	p := dial(b, []string{nodeURL})
	body := make([]byte, 1024)
	msg := &client.Message{Topic: "TopicBench", Body: body}
	var tcpLat, grpcLat, hopLat []time.Duration
	var eight [8]byte
	step := func() {
		t0 := time.Now()
		if _, err := tc.Write(eight[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(tc, eight[:]); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := gst.SendMsg(&body); err != nil {
			b.Fatal(err)
		}
		var in []byte
		if err := gst.RecvMsg(&in); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := p.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		tcpLat, grpcLat, hopLat = append(tcpLat, t1.Sub(t0)), append(grpcLat, t2.Sub(t1)), append(hopLat, t3.Sub(t2))
	}
	for range 200 { // warm up
		step()
	}
	tcpLat, grpcLat, hopLat = tcpLat[:0], grpcLat[:0], hopLat[:0]
	b.ResetTimer()
	for b.Loop() {
		step()
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	t, g, h := p50(tcpLat), p50(grpcLat), p50(hopLat)
	b.ReportMetric(t, "tcp-p50-µs")
	b.ReportMetric(g, "grpc-p50-µs")
	b.ReportMetric(h, "hop-p50-µs")
	b.ReportMetric(g/t, "grpc/tcp")
	b.ReportMetric(h/g, "hop/grpc")
	b.ReportMetric(h/t, "hop/tcp")
}
