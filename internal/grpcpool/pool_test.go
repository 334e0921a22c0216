package grpcpool

import "testing"

// TestPoolTiers: a buffer has the length asked for and the capacity of its
// power-of-two tier, and comes back from Put for the next Get of its tier
// without being zeroed; buffers that are not the pool's are not taken.
func TestPoolTiers(t *testing.T) {
	for _, n := range []int{0, 1, 256, 257, 32 << 10, 32<<10 + 1, 1 << 20} {
		b := Pool.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d): length %d", n, len(*b))
		}
		want := 256
		for want < n {
			want <<= 1
		}
		if cap(*b) != want {
			t.Fatalf("Get(%d): capacity %d, want %d", n, cap(*b), want)
		}
		Pool.Put(b)
	}
	big := Pool.Get(1<<26 + 1)
	if len(*big) != 1<<26+1 {
		t.Fatalf("a buffer over the largest tier: length %d", len(*big))
	}
	Pool.Put(big) // not pooled: must not panic
	odd := make([]byte, 300)
	Pool.Put(&odd) // not a power of two: ignored
	// Reuse keeps the bytes (no zeroing). sync.Pool may drop an item, so
	// try a few times before concluding.
	for range 10 {
		b := Pool.Get(1000)
		(*b)[0] = 0xAB
		Pool.Put(b)
		if c := Pool.Get(1000); (*c)[0] == 0xAB {
			return
		}
	}
	t.Fatal("a reused buffer was zeroed (or never reused)")
}
