package member

import (
	"fmt"

	"github.com/replicatorhq/replicator/core"
)

// cutPartialTail prepares a slave for BecomeMaster: it stops the slave's
// HA client and cuts the record the log ends inside of, if any (the old
// master was still sending it when it died). A master appends only at a
// record boundary, and a store whose log ends inside a record refuses
// Append: without the cut the new master could not take a single put. The
// cut bytes never covered a PUT_OK: a sync put waits for acks past the
// end of its record.
func (m *Member) cutPartialTail() error {
	if m.rep.Role() != core.RoleSlave {
		return nil
	}
	if s := m.rep.Slave(); s != nil {
		s.Close() // BecomeMaster closes it again: a no-op
	}
	st := m.cfg.Replica.Store
	b := st.Bounds()
	off := max(b.Min, b.LastSegmentStart)
	for off < b.Max {
		recs, next, err := st.ReadMessages(off, 256)
		if err != nil {
			return fmt.Errorf("member: scanning the log's last segment at %d: %w", off, err)
		}
		if len(recs) == 0 || next <= off {
			break
		}
		off = next
	}
	if off >= b.Max {
		return nil
	}
	if err := st.Truncate(off); err != nil {
		return fmt.Errorf("member: cutting the partial record at %d (max offset %d): %w", off, b.Max, err)
	}
	m.log.Warn("cut the partial record the log ended inside of before becoming master (the old master was sending it)",
		"from", b.Max, "to", off, "bytes", b.Max-off)
	return nil
}
