package remoting

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The topic config wrapper of the frame tests, as GET_ALL_TOPIC_CONFIG
// answers it.
const testWrapper = `{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":1764576000000},"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}`

var testReg = BrokerRegistration{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", BrokerID: 0, HAServerAddr: "127.0.0.1:10912"}

// frameOf builds a JSON-header frame by hand from the spec:
// [length = 4 + H + B][0x00 | H (u24)][header][body].
func frameOf(header, body string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(header))) // serialize type 0 (JSON) in the high byte
	return append(append(b, header...), body...)
}

func TestBodyCRC32(t *testing.T) {
	// CRC-32 (IEEE) of "123456789" is 0xCBF43926; masked with 0x7FFFFFFF
	// as UtilAll.crc32 does: 0x4BF43926.
	if got := BodyCRC32([]byte("123456789")); got != 0x4BF43926 {
		t.Fatalf("BodyCRC32 = %#x, want 0x4BF43926", got)
	}
	if got := BodyCRC32(nil); got != 0 {
		t.Fatalf("BodyCRC32(nil) = %d", got)
	}
}

func TestRegisterBrokerFrameBytes(t *testing.T) {
	body, err := RegisterBrokerBody([]byte(testWrapper))
	if err != nil {
		t.Fatal(err)
	}
	wantBody := `{"filterServerList":[],"topicConfigSerializeWrapper":` + testWrapper + `}`
	if string(body) != wantBody {
		t.Fatalf("body\n%s\nwant\n%s", body, wantBody)
	}
	req, err := NewRegisterBroker(testReg, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Opaque = 1
	got, err := AppendFrame(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	// bodyCrc32 599708486 = zlib.crc32(body) & 0x7FFFFFFF, computed
	// outside Go.
	header := `{"code":103,"extFields":{"bodyCrc32":"599708486","brokerAddr":"127.0.0.1:10911","brokerId":"0","brokerName":"broker-a",` +
		`"clusterName":"DefaultCluster","compressed":"false","enableActingMaster":"false","haServerAddr":"127.0.0.1:10912"},` +
		`"flag":0,"language":"GO","opaque":1,"serializeTypeCurrentRPC":"JSON","version":413}`
	want := frameOf(header, wantBody)
	if len(header) != 317 || len(want) != 4+598 {
		t.Fatalf("header %d bytes, frame %d: the expected values are off", len(header), len(want))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("frame\n%q\nwant\n%q", got, want)
	}
	// And it decodes back.
	c, err := DecodeFrame(got, 0)
	if err != nil || c.Code != RegisterBroker || c.ExtFields["brokerId"] != "0" || string(c.Body) != wantBody {
		t.Fatalf("decoded %+v, %v", c, err)
	}
}

func TestUnregisterBrokerFrameBytes(t *testing.T) {
	r := testReg
	r.BrokerID = 1
	r.HAServerAddr = "" // not part of UnRegisterBrokerRequestHeader
	req, err := NewUnregisterBroker(r)
	if err != nil {
		t.Fatal(err)
	}
	req.Opaque = 2
	got, err := AppendFrame(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	header := `{"code":104,"extFields":{"brokerAddr":"127.0.0.1:10911","brokerId":"1","brokerName":"broker-a","clusterName":"DefaultCluster"},` +
		`"flag":0,"language":"GO","opaque":2,"serializeTypeCurrentRPC":"JSON","version":413}`
	if want := frameOf(header, ""); !bytes.Equal(got, want) {
		t.Fatalf("frame\n%q\nwant\n%q", got, want)
	}
}

func TestRegisterBrokerRejects(t *testing.T) {
	for _, wrapper := range []string{"", "[]", `{"a":`, "null"} {
		if _, err := RegisterBrokerBody([]byte(wrapper)); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("wrapper %q: %v, want ErrInvalidCommand", wrapper, err)
		}
	}
	for _, r := range []BrokerRegistration{
		{BrokerName: "b", BrokerAddr: "a:1", HAServerAddr: "a:2"},
		{ClusterName: "c", BrokerAddr: "a:1", HAServerAddr: "a:2"},
		{ClusterName: "c", BrokerName: "b", HAServerAddr: "a:2"},
		{ClusterName: "c", BrokerName: "b", BrokerAddr: "a:1"},
		{ClusterName: "c", BrokerName: "b", BrokerAddr: "a:1", HAServerAddr: "a:2", BrokerID: -1},
	} {
		if _, err := NewRegisterBroker(r, []byte("{}")); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("%+v: %v, want ErrInvalidCommand", r, err)
		}
	}
}

// TestParseRegisterResponse reads answers as a name server writes them
// (RegisterBrokerResponseHeader in a JSON header, language JAVA).
func TestParseRegisterResponse(t *testing.T) {
	decode := func(header string) *Command {
		t.Helper()
		c, err := DecodeFrame(frameOf(header, ""), 0)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	res, err := ParseRegisterResponse(decode(`{"code":0,"extFields":{"haServerAddr":"10.0.0.1:10912","masterAddr":"10.0.0.1:10911"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":413}`))
	if err != nil || res != (RegisterResult{MasterAddr: "10.0.0.1:10911", HAServerAddr: "10.0.0.1:10912"}) {
		t.Fatalf("%+v, %v", res, err)
	}
	// A master's own registration: no addresses.
	res, err = ParseRegisterResponse(decode(`{"code":0,"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":413}`))
	if err != nil || res != (RegisterResult{}) {
		t.Fatalf("%+v, %v", res, err)
	}
	_, err = ParseRegisterResponse(decode(`{"code":1,"flag":1,"language":"JAVA","opaque":5,"remark":"crc32 not match","serializeTypeCurrentRPC":"JSON","version":413}`))
	if !errors.Is(err, ErrNamesrv) || !strings.Contains(err.Error(), "crc32 not match") {
		t.Fatalf("error answer: %v", err)
	}
	long := strings.Repeat("x", MaxNamesrvAddrLen+1)
	_, err = ParseRegisterResponse(decode(`{"code":0,"extFields":{"masterAddr":"` + long + `"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":413}`))
	if !errors.Is(err, ErrNamesrv) {
		t.Fatalf("overlong address: %v", err)
	}
}

func TestParseNamesrvAddrs(t *testing.T) {
	for in, want := range map[string][]string{
		"127.0.0.1:9876":                  {"127.0.0.1:9876"},
		"a:9876;b:9876":                   {"a:9876", "b:9876"},
		"a:9876, b:9876;":                 {"a:9876", "b:9876"},
		" ; ,":                            nil,
		"10.0.0.1:9876;10.0.0.2:9876,c:1": {"10.0.0.1:9876", "10.0.0.2:9876", "c:1"},
		"[::1]:9876;host.example:9876":    {"[::1]:9876", "host.example:9876"},
	} {
		if got := ParseNamesrvAddrs(in); !reflect.DeepEqual(got, want) {
			t.Errorf("ParseNamesrvAddrs(%q) = %q, want %q", in, got, want)
		}
	}
}
