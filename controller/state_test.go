package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestGroupRoundTrip(t *testing.T) {
	for _, g := range []Group{
		NewState().Group,
		{Master: 2, MasterEpoch: 4, SyncStateSet: []int64{1, 2, 3}, SyncStateSetEpoch: 9},
		{Master: 5, MasterEpoch: 1, SyncStateSet: []int64{5}, SyncStateSetEpoch: 1, Unclean: true},
		{Master: NoMaster, MasterEpoch: 7, SyncStateSet: []int64{0, 3}, SyncStateSetEpoch: 2, NoMasterReason: "lease of master 0 expired"},
	} {
		b, err := EncodeGroup(g)
		if err != nil {
			t.Fatalf("encode %+v: %v", g, err)
		}
		got, err := DecodeGroup(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if !got.Equal(g) {
			t.Fatalf("round trip %s: %+v, want %+v", b, got, g)
		}
	}
}

func TestGroupJSONExample(t *testing.T) {
	// The example of the package doc.
	const doc = `{"master":2,"master_epoch":4,"sync_state_set":[1,2,3],"sync_state_set_epoch":9}`
	b, err := EncodeGroup(Group{Master: 2, MasterEpoch: 4, SyncStateSet: []int64{1, 2, 3}, SyncStateSetEpoch: 9})
	if err != nil || string(b) != doc {
		t.Fatalf("encoded %s (%v), want %s", b, err, doc)
	}
}

func TestDecodeGroupRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":             ``,
		"null":              `null`,
		"not json":          `{"master":`,
		"trailing":          `{"master":-1,"master_epoch":0} {}`,
		"master at epoch 0": `{"master":1,"master_epoch":0,"sync_state_set":[1]}`,
		"master not in set": `{"master":1,"master_epoch":2,"sync_state_set":[2]}`,
		"unsorted":          `{"master":1,"master_epoch":2,"sync_state_set":[2,1]}`,
		"duplicate":         `{"master":1,"master_epoch":2,"sync_state_set":[1,1]}`,
		"negative member":   `{"master":-1,"master_epoch":2,"sync_state_set":[-3]}`,
		"negative epoch":    `{"master":-1,"master_epoch":-2}`,
		"bad master":        `{"master":-2,"master_epoch":2}`,
		"epoch overflow":    `{"master":-1,"master_epoch":2147483648}`,
		"wrong type":        `{"master":"x"}`,
		"huge":              `{"no_master_reason":"` + strings.Repeat("x", MaxEncodedSize) + `"}`,
		"long reason":       `{"master":-1,"master_epoch":1,"no_master_reason":"` + strings.Repeat("x", MaxTextSize+1) + `"}`,
	} {
		if _, err := DecodeGroup([]byte(in)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	big := make([]int64, MaxSetSize+1)
	for i := range big {
		big[i] = int64(i)
	}
	if _, err := EncodeGroup(Group{Master: 0, MasterEpoch: 1, SyncStateSet: big}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("oversized set encoded: %v", err)
	}
}

func TestNodeRoundTrip(t *testing.T) {
	n := Node{BrokerID: 3, HAAddr: "127.0.0.1:10912", APIAddr: "127.0.0.1:8080", Epoch: 4, MaxOffset: 1 << 40, Alive: true}
	b, err := EncodeNode(n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNode(b)
	if err != nil {
		t.Fatal(err)
	}
	n.Alive = false
	if got != n {
		t.Fatalf("%+v, want %+v", got, n)
	}
	for name, in := range map[string]string{
		"negative id":     `{"broker_id":-1}`,
		"negative offset": `{"broker_id":1,"max_offset":-1}`,
		"long address":    `{"broker_id":1,"ha_addr":"` + strings.Repeat("a", MaxTextSize+1) + `"}`,
		"garbage":         `[1,2]`,
	} {
		if _, err := DecodeNode([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := EncodeNode(Node{BrokerID: -1}); !errors.Is(err, ErrBadBrokerID) {
		t.Errorf("negative id encoded: %v", err)
	}
}

func TestCloneIsDeep(t *testing.T) {
	s := group(1, 2, []int64{1, 2}, 3, []Node{nd(1, 2, 3), nd(2, 2, 3)})
	c := s.Clone()
	c.Group.SyncStateSet[0] = 9
	c.Nodes[1] = nd(1, 9, 9)
	if s.Group.SyncStateSet[0] != 1 || s.Nodes[1].Epoch != 2 {
		t.Fatal("Clone shares memory with the original")
	}
	if !slices.Equal(State{}.Clone().Group.SyncStateSet, []int64{}) {
		t.Fatal("Clone of the zero State has a nil set")
	}
}

// FuzzDecodeGroup: a group key from etcd is untrusted input. Decoding
// never panics, and whatever decodes re-encodes to an equal state.
func FuzzDecodeGroup(f *testing.F) {
	f.Add([]byte(`{"master":2,"master_epoch":4,"sync_state_set":[1,2,3],"sync_state_set_epoch":9}`))
	f.Add([]byte(`{"master":-1,"master_epoch":0,"sync_state_set":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := DecodeGroup(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc, err := EncodeGroup(g)
		if err != nil {
			t.Fatalf("decoded state does not encode: %v", err)
		}
		again, err := DecodeGroup(enc)
		if err != nil || !again.Equal(g) {
			t.Fatalf("re-decode: %+v %v, want %+v", again, err, g)
		}
	})
}

// FuzzDecodeNode: a node registration from etcd is untrusted input.
func FuzzDecodeNode(f *testing.F) {
	f.Add([]byte(`{"broker_id":3,"ha_addr":"127.0.0.1:10912","api_addr":"127.0.0.1:8080","epoch":4,"max_offset":100}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeNode(b)
		if err != nil {
			return
		}
		enc, err := EncodeNode(n)
		if err != nil {
			t.Fatalf("decoded node does not encode: %v", err)
		}
		if again, err := DecodeNode(enc); err != nil || again != n {
			t.Fatalf("re-decode: %+v %v, want %+v", again, err, n)
		}
	})
}
