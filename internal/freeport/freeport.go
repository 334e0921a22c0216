// Package freeport picks free loopback TCP ports for processes that must be
// told their addresses before they listen: the demo's daemons and the tests'
// child processes and replicas.
//
// A port the kernel hands out for "127.0.0.1:0" lies in the ephemeral range
// (net.ipv4.ip_local_port_range, 32768–60999 by default), the range it also
// takes the local port of every outgoing connection from. Between the choice
// and the process's own bind, any connection on the machine can take that
// port, and the process fails with "address already in use". freeport picks
// below the ephemeral range, where only another listener can collide, at a
// random place so that concurrent test processes rarely try the same port,
// and checks each port by binding it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port picked: above the well-known and most
// registered service ports.
const lowest = 20000

// Ports returns n distinct ports free on 127.0.0.1 right now.
func Ports(n int) ([]int, error) {
	hi := ephemeralStart() - 1
	if hi-lowest < 4*n {
		return kernelPorts(n) // no room below the ephemeral range
	}
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	span := hi - lowest + 1
	start := rand.IntN(span)
	out := make([]int, 0, n)
	for i := 0; i < span && len(out) < n; i++ {
		p := lowest + (start+i)%span
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken
		}
		lns = append(lns, l)
		out = append(out, p)
	}
	if len(out) < n {
		return nil, fmt.Errorf("freeport: %d free ports wanted between %d and %d, found %d", n, lowest, hi, len(out))
	}
	return out, nil
}

// Addrs returns n distinct free "127.0.0.1:port" addresses.
func Addrs(n int) ([]string, error) {
	ps, err := Ports(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out, nil
}

// kernelPorts asks the kernel for n ports (":0"), the fallback where the
// ephemeral range leaves no room below it.
func kernelPorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("freeport: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range (Linux),
// or 32768 where it cannot be read (the Linux default, and above the
// range's start on the BSDs' and macOS's 49152).
func ephemeralStart() int {
	const dflt = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return dflt
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return dflt
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 {
		return dflt
	}
	return lo
}
