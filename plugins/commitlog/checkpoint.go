package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"os"
	"slices"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
)

// Checkpoint file (DATA/commitlog.checkpoint), all big-endian, replaced
// atomically (write tmp, fsync, rename, fsync dir):
//
//	off  size  field
//	  0     4  magic "RPCK" 0x5250434B
//	  4     4  version 1
//	  8     8  flushed offset: every byte of the log below it is durable
//	 16     8  scan offset: a record boundary <= flushed; the queue table
//	           below holds the state after every record before it
//	 24     8  store timestamp of the last record before scan (Unix ms)
//	 32     4  flags: bit 0 = clean shutdown (the log ends exactly at flushed)
//	 36     4  n, number of queue entries
//	 40     …  n × [1 topic length][topic][4 queue id][8 next queue offset]
//	  …     4  CRC-32 (IEEE) of every byte before it
const (
	checkpointName    = "commitlog.checkpoint"
	checkpointMagic   = 0x5250434B
	checkpointVersion = 1
	checkpointHeader  = 40
	checkpointMaxSize = 64 << 20
)

// queueTable maps topic → queue id → next queue offset.
type queueTable map[string]map[int32]int64

func (q queueTable) clone() queueTable {
	c := make(queueTable, len(q))
	for t, m := range q {
		c[t] = maps.Clone(m)
	}
	return c
}

func (q queueTable) set(topic []byte, qid int32, next int64) {
	m := q[string(topic)]
	if m == nil {
		m = make(map[int32]int64, 4)
		q[string(topic)] = m
	}
	m[qid] = next
}

type checkpoint struct {
	Clean     bool // written by Close: nothing was appended after Flushed
	Flushed   int64
	Scan      int64
	Timestamp int64
	Queues    queueTable
}

func (c *checkpoint) encode() []byte {
	be := binary.BigEndian
	b := make([]byte, checkpointHeader, 4096)
	be.PutUint32(b[0:], checkpointMagic)
	be.PutUint32(b[4:], checkpointVersion)
	be.PutUint64(b[8:], uint64(c.Flushed))
	be.PutUint64(b[16:], uint64(c.Scan))
	be.PutUint64(b[24:], uint64(c.Timestamp))
	if c.Clean {
		be.PutUint32(b[32:], 1)
	}
	n := 0
	topics := make([]string, 0, len(c.Queues))
	for t := range c.Queues {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		qids := make([]int32, 0, len(c.Queues[t]))
		for q := range c.Queues[t] {
			qids = append(qids, q)
		}
		slices.Sort(qids)
		for _, q := range qids {
			b = append(b, byte(len(t)))
			b = append(b, t...)
			b = be.AppendUint32(b, uint32(q))
			b = be.AppendUint64(b, uint64(c.Queues[t][q]))
			n++
		}
	}
	be.PutUint32(b[36:], uint32(n))
	return be.AppendUint32(b, crc32.ChecksumIEEE(b))
}

var errBadCheckpoint = errors.New("commitlog: bad checkpoint")

func decodeCheckpoint(b []byte) (checkpoint, error) {
	be := binary.BigEndian
	if len(b) < checkpointHeader+4 {
		return checkpoint{}, fmt.Errorf("%w: %d bytes", errBadCheckpoint, len(b))
	}
	body, sum := b[:len(b)-4], be.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return checkpoint{}, fmt.Errorf("%w: checksum mismatch", errBadCheckpoint)
	}
	if be.Uint32(b) != checkpointMagic || be.Uint32(b[4:]) != checkpointVersion {
		return checkpoint{}, fmt.Errorf("%w: magic or version", errBadCheckpoint)
	}
	c := checkpoint{
		Flushed:   int64(be.Uint64(b[8:])),
		Scan:      int64(be.Uint64(b[16:])),
		Timestamp: int64(be.Uint64(b[24:])),
		Clean:     be.Uint32(b[32:])&1 != 0,
		Queues:    queueTable{},
	}
	n := int(be.Uint32(b[36:]))
	if err := c.valid(); err != nil || n > (len(body)-checkpointHeader)/13 {
		return checkpoint{}, fmt.Errorf("%w: offsets %d/%d, %d entries", errBadCheckpoint, c.Flushed, c.Scan, n)
	}
	p := body[checkpointHeader:]
	for i := 0; i < n; i++ {
		if len(p) < 1 || len(p) < 1+int(p[0])+12 {
			return checkpoint{}, fmt.Errorf("%w: entry %d truncated", errBadCheckpoint, i)
		}
		tl := int(p[0])
		c.Queues.set(p[1:1+tl], int32(be.Uint32(p[1+tl:])), int64(be.Uint64(p[5+tl:])))
		p = p[13+tl:]
	}
	if len(p) != 0 {
		return checkpoint{}, fmt.Errorf("%w: %d trailing bytes", errBadCheckpoint, len(p))
	}
	return c, nil
}

// readCheckpoint returns the checkpoint at path; fs.ErrNotExist when there is none.
func readCheckpoint(fsys vfs.FS, path string) (checkpoint, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return checkpoint{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return checkpoint{}, err
	}
	if fi.Size() > checkpointMaxSize {
		return checkpoint{}, fmt.Errorf("%w: %d bytes", errBadCheckpoint, fi.Size())
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return checkpoint{}, fmt.Errorf("commitlog: read checkpoint: %w", err)
	}
	return decodeCheckpoint(b)
}

// valid checks the offsets' invariant: the scan offset is a record
// boundary at or below the flushed offset, so that every record below it
// is durable and recovery may call a record there that does not verify
// corruption rather than a torn write.
func (c *checkpoint) valid() error {
	if c.Scan < 0 || c.Flushed < c.Scan {
		return fmt.Errorf("%w: scan offset %d must be in [0, flushed offset %d]", errBadCheckpoint, c.Scan, c.Flushed)
	}
	return nil
}

// writeCheckpoint replaces the log's checkpoint atomically and durably.
// It refuses a checkpoint that readCheckpoint would refuse.
func (l *Log) writeCheckpoint(c *checkpoint) error {
	if err := c.valid(); err != nil {
		return fmt.Errorf("commitlog: write checkpoint: %w", err)
	}
	tmp := l.ckptPath + ".tmp"
	err := vfs.WriteFileSync(l.fs, tmp, c.encode(), os.O_TRUNC, 0o644)
	if err == nil {
		err = l.fs.Rename(tmp, l.ckptPath)
	}
	if err != nil {
		l.fs.Remove(tmp)
		return fmt.Errorf("commitlog: write checkpoint: %w", err)
	}
	return syncDir(l.fs, l.root)
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
