package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// metadataInterval is the slave's --metadata-interval in startSlave.
const metadataInterval = time.Second

// TestE2EMetadata runs a real master and slave (startMaster/startSlave,
// slave --metadata-interval 1s): documents PUT on the master appear on the
// slave within one interval, consumer offsets are merged (an entry only
// the slave has survives), the slave refuses metadata writes, bad names get
// a JSON 400 through the daemon's mux, and the slave's copy survives a
// restart of the master.
func TestE2EMetadata(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sdir := filepath.Join(dir, "s")

	// An offset the slave has and the master never had: merging keeps it.
	cfgDir := metadata.ConfigDir(sdir)
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	seed := metadata.EncodeDocument(meta.DataVersion{Counter: 1}, json.RawMessage(`{"offsetTable":{"Old@g":{"0":5}}}`))
	if err := os.WriteFile(filepath.Join(cfgDir, metadata.ConsumerOffsetName), seed, 0o644); err != nil {
		t.Fatal(err)
	}

	m := startMaster(t, filepath.Join(dir, "m"))
	s := startSlave(t, sdir, m)

	// The first round (at start) copies the master's default documents.
	eventually(t, "first metadata sync", func() error {
		_, err := getDoc(t, s.api, metadata.TopicsName)
		return err
	})

	putDoc := func(name, body string) metadata.PutResponse {
		t.Helper()
		code, b := httpDo(t, "PUT", m.api+"/v1/metadata/"+name, nil, []byte(body))
		var pr metadata.PutResponse
		if code != 200 || json.Unmarshal(b, &pr) != nil {
			t.Fatalf("PUT %s on the master: %d %s", name, code, b)
		}
		return pr
	}
	start := time.Now()
	topics := putDoc(metadata.TopicsName, `{"topicConfigTable":{"TopicTest":{"perm":6,"readQueueNums":4,"writeQueueNums":4}}}`)
	offsets := putDoc(metadata.ConsumerOffsetName, `{"offsetTable":{"TopicTest@g":{"0":42,"1":7}}}`)
	custom := putDoc("acl-rules", `{"rules":[]}`)
	eventually(t, "change on the slave", func() error {
		for _, want := range []metadata.PutResponse{topics, offsets, custom} {
			d, err := getDoc(t, s.api, want.Name)
			if err != nil {
				return err
			}
			if d.Version != want.Version {
				return fmt.Errorf("%s at %+v, want %+v", want.Name, d.Version, want.Version)
			}
		}
		return nil
	})
	elapsed := time.Since(start)
	t.Logf("metadata change visible on the slave %v after the PUTs (interval %v)", elapsed, metadataInterval)
	// One interval; the second of slack covers two race-enabled processes
	// on a loaded 2-core CI machine and the 10 ms polling.
	if elapsed > metadataInterval+time.Second {
		t.Errorf("the change took %v to reach the slave; the interval is %v", elapsed, metadataInterval)
	}

	if d, _ := getDoc(t, s.api, metadata.TopicsName); !strings.Contains(string(d.Body), "TopicTest") {
		t.Errorf("slave topics.json body %s", d.Body)
	}
	if d, _ := getDoc(t, s.api, metadata.ConsumerOffsetName); string(d.Body) != `{"offsetTable":{"Old@g":{"0":5},"TopicTest@g":{"0":42,"1":7}}}` {
		t.Errorf("slave consumerOffset.json %s: want the merged table", d.Body)
	}
	// The files are RocketMQ's: dataVersion embedded.
	if b, err := os.ReadFile(filepath.Join(cfgDir, metadata.TopicsName)); err != nil || !strings.HasPrefix(string(b), `{"dataVersion":{`) {
		t.Errorf("slave topics.json file: %v %s", err, b)
	}

	// The slave is read-only; bad names get a JSON 400 through the daemon.
	if code, b := httpDo(t, "PUT", s.api+"/v1/metadata/topics.json", nil, []byte(`{}`)); code != 403 || !strings.Contains(string(b), `"error"`) {
		t.Errorf("PUT on the slave: %d %s", code, b)
	}
	if code, b := httpDo(t, "PUT", m.api+"/v1/metadata/a%2Fb", nil, []byte(`{}`)); code != 400 || !strings.Contains(string(b), "path separator") {
		t.Errorf("PUT a%%2Fb on the master: %d %s", code, b)
	}
	if code, b := httpDo(t, "PUT", m.api+"/v1/metadata/x.json", nil, []byte(`not json`)); code != 400 || !strings.Contains(string(b), "not valid JSON") {
		t.Errorf("PUT of a non-JSON body on the master: %d %s", code, b)
	}

	// Master down: the slave keeps serving its copy; master back: a new
	// change flows again.
	m.stop()
	if d, err := getDoc(t, s.api, metadata.TopicsName); err != nil || d.Version != topics.Version {
		t.Fatalf("slave copy while the master is down: %+v %v", d.Version, err)
	}
	m.restart()
	topics2 := putDoc(metadata.TopicsName, `{"topicConfigTable":{}}`)
	eventually(t, "change after the master restarted", func() error {
		d, err := getDoc(t, s.api, metadata.TopicsName)
		if err == nil && d.Version != topics2.Version {
			err = fmt.Errorf("at %+v, want %+v", d.Version, topics2.Version)
		}
		return err
	})
	s.stop()
	m.stop()
}

// getDoc fetches one metadata document from a node's API.
func getDoc(t *testing.T, apiURL, name string) (meta.Document, error) {
	t.Helper()
	code, b := httpDo(t, "GET", apiURL+"/v1/metadata/"+name, nil, nil)
	if code != 200 {
		return meta.Document{}, fmt.Errorf("GET %s: %d %s", name, code, b)
	}
	v, body, err := metadata.DecodeDocument(b)
	if err != nil {
		return meta.Document{}, err
	}
	return meta.Document{Name: name, Version: v, Body: body}, nil
}
