package epoch

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkAppend measures Append, which writes and fsyncs the file and the
// directory, on lists of 1 and 1000 entries (1000: a handshake's limit).
// "baseline" is the floor in the same run: one small file written and
// fsynced plus one directory fsync, the least a durable rename costs.
func BenchmarkAppend(b *testing.B) {
	b.Run("baseline", func(b *testing.B) {
		dir := b.TempDir()
		p := filepath.Join(dir, "x")
		for b.Loop() {
			if err := writeSynced(p, []byte("1\n0\n1-0\n")); err != nil {
				b.Fatal(err)
			}
			if err := syncDir(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			es := make([]Entry, n)
			for i := range es {
				es[i] = Entry{Epoch: int32(i + 1), StartOffset: int64(i) * 1 << 20}
			}
			setEnds(es, Unbounded)
			if _, err := persist(dir, filepath.Join(dir, FileName), es, true); err != nil {
				b.Fatal(err)
			}
			f, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			last, _ := f.Last()
			for b.Loop() {
				// Append one epoch, then (untimed) drop it again so that
				// every timed Append writes a list of n+1 entries.
				if err := f.Append(last.Epoch+1, last.StartOffset+1); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := f.TruncateSuffixByEpoch(last.Epoch + 1); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	es := make([]Entry, 1000)
	for i := range es {
		es[i] = Entry{Epoch: int32(i + 1), StartOffset: int64(i) * 1 << 30}
	}
	text := Encode(es)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := Decode(text); err != nil {
			b.Fatal(err)
		}
	}
}
