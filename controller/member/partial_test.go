package member

import (
	"fmt"
	"slices"
	"testing"

	"github.com/replicatorhq/replicator/core"
)

// TestElectedWithPartialRecord: a slave whose log ends inside a record
// (the master died while sending it) is elected: it cuts the partial
// record as it becomes master (core.Replica.BecomeMaster), and takes
// puts. OnRoleChange reports each role change once, after core switched.
func TestElectedWithPartialRecord(t *testing.T) {
	c := newCluster(t)
	n1 := c.start(1, t.TempDir(), freeAddr(t), etcdURL)
	c.waitGroup(1, 0, []int64{1})
	n2 := c.start(2, t.TempDir(), freeAddr(t), etcdURL)
	c.waitGroup(1, 0, []int64{1, 2})
	putN(t, n1, 5)
	waitFor(t, "the slave holds every put", func() bool { return n2.log.Bounds().Max == n1.log.Bounds().Max })

	// Half a record at the end of the slave's log: the first 40 bytes of
	// its first record (a header that announces more).
	v, err := n2.log.Read(0, 40)
	if err != nil {
		t.Fatal(err)
	}
	half := slices.Clone(v.Data)
	v.Release()
	whole := n2.log.Bounds().Max
	if _, err := n2.log.AppendAt(whole, half); err != nil {
		t.Fatal(err)
	}

	c.stop(n1, true)
	m := c.waitGroup(2, 1, []int64{2})
	if got := n2.log.Bounds().Max; got != whole {
		t.Fatalf("max offset %d after the election, want %d (the partial record cut)", got, whole)
	}
	putN(t, m, 3)

	// The hook runs after core switched, so it may trail the first put:
	// wait for the second change, then check there were exactly these.
	roleChanges := func() []string {
		n2.rmu.Lock()
		defer n2.rmu.Unlock()
		var got []string
		for _, rc := range n2.roles {
			got = append(got, fmt.Sprintf("%s %d %s", rc.Role, rc.Master, rc.MasterHA))
		}
		return got
	}
	waitFor(t, "the master role change reported", func() bool { return len(roleChanges()) >= 2 })
	want := []string{fmt.Sprintf("%s 1 %s", core.RoleSlave, n1.ha), fmt.Sprintf("%s 2 %s", core.RoleMaster, n2.ha)}
	if got := roleChanges(); !slices.Equal(got, want) {
		t.Fatalf("role changes %q, want %q", got, want)
	}
}
