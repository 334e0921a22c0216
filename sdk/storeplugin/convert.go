package storeplugin

import (
	"bytes"
	"maps"
	"net/netip"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

func addrToProto(a netip.AddrPort) []byte {
	if a == (netip.AddrPort{}) {
		return nil
	}
	b, _ := a.MarshalBinary() // never fails
	return b
}

func addrFromProto(b []byte) netip.AddrPort {
	var a netip.AddrPort
	if len(b) > 0 {
		_ = a.UnmarshalBinary(b) // a bad address decodes as the zero value
	}
	return a
}

// messageToProto copies msg (the body too: the caller may reuse it as soon
// as Append returns, even when it returns early on ctx).
func messageToProto(m *record.Message) *storev1.Message {
	return &storev1.Message{
		Topic:                     m.Topic,
		QueueId:                   m.QueueID,
		Flag:                      m.Flag,
		Body:                      bytes.Clone(m.Body),
		Properties:                maps.Clone(m.Properties),
		SysFlag:                   m.SysFlag,
		BornTimestamp:             m.BornTimestamp,
		BornHost:                  addrToProto(m.BornHost),
		StoreHost:                 addrToProto(m.StoreHost),
		ReconsumeTimes:            m.ReconsumeTimes,
		PreparedTransactionOffset: m.PreparedTransactionOffset,
	}
}

func messageFromProto(p *storev1.Message) record.Message {
	if p == nil {
		return record.Message{}
	}
	return record.Message{
		Topic:                     p.Topic,
		QueueID:                   p.QueueId,
		Flag:                      p.Flag,
		Body:                      p.Body,
		Properties:                p.Properties,
		SysFlag:                   p.SysFlag,
		BornTimestamp:             p.BornTimestamp,
		BornHost:                  addrFromProto(p.BornHost),
		StoreHost:                 addrFromProto(p.StoreHost),
		ReconsumeTimes:            p.ReconsumeTimes,
		PreparedTransactionOffset: p.PreparedTransactionOffset,
	}
}

func recordToProto(r *record.Record) *storev1.Record {
	m := r.Message
	pm := messageToProto(&m)
	return &storev1.Record{
		Message:        pm,
		TotalSize:      r.TotalSize,
		BodyCrc:        r.BodyCRC,
		QueueOffset:    r.QueueOffset,
		PhysicalOffset: r.PhysicalOffset,
		StoreTimestamp: r.StoreTimestamp,
	}
}

func recordFromProto(p *storev1.Record) record.Record {
	return record.Record{
		Message:        messageFromProto(p.Message),
		TotalSize:      p.TotalSize,
		BodyCRC:        p.BodyCrc,
		QueueOffset:    p.QueueOffset,
		PhysicalOffset: p.PhysicalOffset,
		StoreTimestamp: p.StoreTimestamp,
	}
}

func resultToProto(r store.AppendResult) *storev1.AppendResult {
	return &storev1.AppendResult{
		Offset:         r.Offset,
		NextOffset:     r.NextOffset,
		QueueOffset:    r.QueueOffset,
		StoreTimestamp: r.StoreTimestamp,
		Size:           r.Size,
	}
}

func resultFromProto(p *storev1.AppendResult) store.AppendResult {
	if p == nil {
		return store.AppendResult{}
	}
	return store.AppendResult{
		Offset:         p.Offset,
		NextOffset:     p.NextOffset,
		QueueOffset:    p.QueueOffset,
		StoreTimestamp: p.StoreTimestamp,
		Size:           p.Size,
	}
}

func boundsToProto(b store.Bounds, seq uint64) *storev1.Bounds {
	return &storev1.Bounds{
		Min:              b.Min,
		Max:              b.Max,
		Flushed:          b.Flushed,
		LastSegmentStart: b.LastSegmentStart,
		SegmentSize:      b.SegmentSize,
		Seq:              seq,
	}
}

func boundsFromProto(p *storev1.Bounds) store.Bounds {
	return store.Bounds{
		Min:              p.Min,
		Max:              p.Max,
		Flushed:          p.Flushed,
		LastSegmentStart: p.LastSegmentStart,
		SegmentSize:      p.SegmentSize,
	}
}
