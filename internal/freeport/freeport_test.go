package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsBelowEphemeral: the ports are distinct, bindable and below the
// kernel's ephemeral range (where outgoing connections take theirs).
func TestPortsBelowEphemeral(t *testing.T) {
	ps, err := Ports(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ps)
		}
		seen[p] = true
		if p < lowest || p >= ephemeralStart() {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, ephemeralStart())
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		l.Close()
	}
}

// TestPortsSkipsTaken: a port held by a listener is never handed out.
func TestPortsSkipsTaken(t *testing.T) {
	held := map[int]net.Listener{}
	for range 64 {
		ps, err := Ports(1)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := held[ps[0]]; ok {
			t.Fatalf("port %d handed out while held", ps[0])
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ps[0])))
		if err != nil {
			t.Fatalf("port %d: %v", ps[0], err)
		}
		held[ps[0]] = l
	}
	for _, l := range held {
		l.Close()
	}
}
