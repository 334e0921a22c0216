package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/replicatorhq/replicator/sdk/record"
)

// BenchmarkPluginAppendAt: one AppendAt of 32 KiB at a time (the slave's
// path), builtin vs external: the round trip of the append stream.
func BenchmarkPluginAppendAt(b *testing.B) {
	plugin := pluginPath(b)
	for _, mode := range benchModes {
		b.Run(mode, func(b *testing.B) {
			st := openMode(b, mode, plugin, filepath.Join(b.TempDir(), "s"))
			defer st.Close()
			data := make([]byte, 32<<10)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for range b.N {
				max := st.Bounds().Max
				seg := st.Bounds().SegmentSize
				n := min(int64(len(data)), seg-max%seg)
				if _, err := st.AppendAt(max, data[:n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPluginAppend: 1 KiB messages appended by 64 goroutines: the
// batching of the append stream.
func BenchmarkPluginAppend(b *testing.B) {
	plugin := pluginPath(b)
	for _, mode := range benchModes {
		b.Run(mode, func(b *testing.B) {
			st := openMode(b, mode, plugin, filepath.Join(b.TempDir(), "s"))
			defer st.Close()
			b.SetBytes(1024)
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				msg := &record.Message{Topic: "TopicBench", Body: make([]byte, 1024)}
				for pb.Next() {
					if _, err := st.Append(context.Background(), msg); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkPluginAppendLatency: one producer, one 1 KiB Append at a time:
// the round trip of one batch on the append stream.
func BenchmarkPluginAppendLatency(b *testing.B) {
	plugin := pluginPath(b)
	for _, mode := range benchModes {
		b.Run(mode, func(b *testing.B) {
			st := openMode(b, mode, plugin, filepath.Join(b.TempDir(), "s"))
			defer st.Close()
			msg := &record.Message{Topic: "TopicBench", Body: make([]byte, 1024)}
			b.ResetTimer()
			for range b.N {
				if _, err := st.Append(context.Background(), msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
