package metadata

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/sdk/meta"
)

// topicsBody returns a topics.json body with n topics, about 200 bytes each.
func topicsBody(n int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"topicConfigTable":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"Topic%05d":{"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"Topic%05d","topicSysFlag":0,"writeQueueNums":8}`, i, i)
	}
	b.WriteString(`}}`)
	return json.RawMessage(b.String())
}

// BenchmarkStorePut: one durable document write (two fsyncs of the file
// and the directory, plus the backup rename).
func BenchmarkStorePut(b *testing.B) {
	for _, n := range []int{10, 1000} {
		body := topicsBody(n)
		b.Run(fmt.Sprintf("topics=%d", n), func(b *testing.B) {
			st, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := st.Put(context.Background(), TopicsName, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeDocument(b *testing.B) {
	data := EncodeDocument(meta.DataVersion{Counter: 1}, topicsBody(1000))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := DecodeDocument(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSyncRound: one syncer round over HTTP against a master with the
// four default documents. "idle" fetches only the list; "changed" also
// fetches and applies a 1000-topic topics.json.
func BenchmarkSyncRound(b *testing.B) {
	for _, changed := range []bool{false, true} {
		b.Run(map[bool]string{false: "idle", true: "changed"}[changed], func(b *testing.B) {
			ctx := context.Background()
			master, err := Open(b.TempDir(), Options{CreateDefaults: true})
			if err != nil {
				b.Fatal(err)
			}
			defer master.Close()
			h, _ := NewHandler(HandlerConfig{Store: master})
			srv := httptest.NewServer(h)
			defer srv.Close()
			slave, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer slave.Close()
			src, _ := NewHTTPSource(HTTPSourceConfig{BaseURL: srv.URL, Client: srv.Client()})
			sy, err := NewSyncer(SyncerConfig{Master: src, Local: slave})
			if err != nil {
				b.Fatal(err)
			}
			body := topicsBody(1000)
			for b.Loop() {
				if changed {
					b.StopTimer()
					if _, err := master.Put(ctx, TopicsName, body); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if r := sy.SyncOnce(ctx); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
		})
	}
}
