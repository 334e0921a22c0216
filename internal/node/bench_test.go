package node

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// BenchmarkNodePut measures producer puts over the HTTP API of an in-process
// async master (real commit log, loopback TCP, keep-alive connections), with
// GOMAXPROCS-many concurrent producers.
func BenchmarkNodePut(b *testing.B) {
	for _, size := range []int{128, 1 << 10, 16 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			url, stop := benchMaster(b)
			defer stop()
			body := bytes.Repeat([]byte("b"), size)
			tr := &http.Transport{MaxIdleConnsPerHost: 256}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			b.SetBytes(int64(size))
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := hc.Post(url+"/v1/topics/Bench/messages", "", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("put: %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

func benchMaster(b *testing.B) (string, func()) {
	n, err := New(Config{Role: core.AsyncMaster, DataDir: filepath.Join(b.TempDir(), "m"), Listen: "127.0.0.1:0",
		HAListen: "127.0.0.1:0", SegmentSize: 256 << 20, Registry: pluginhost.Builtin()})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- n.Run(ctx) }()
	<-n.Ready()
	return "http://" + n.Addr(), func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}
