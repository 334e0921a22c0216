package remoting

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Name-server codes (RequestCode.java).
const (
	RegisterBroker   int32 = 103
	UnregisterBroker int32 = 104
)

// RegisterVersion is the RocketMQ version ordinal replicator sends in its
// name-server requests: MQVersion.Version.V5_0_0. A name server decodes
// the REGISTER_BROKER body as a RegisterBrokerBody only from V3_0_11 (37)
// up; below, it takes the body for a bare TopicConfigSerializeWrapper.
const RegisterVersion int32 = 413

// MaxNamesrvAddrLen bounds each address a name server answers with
// (masterAddr, haServerAddr): a longer one is malformed.
const MaxNamesrvAddrLen = 255

// MasterID is the broker id of a group's master (MixAll.MASTER_ID).
const MasterID int64 = 0

// BrokerRegistration is what a broker tells its name servers about
// itself (RegisterBrokerRequestHeader and UnRegisterBrokerRequestHeader).
type BrokerRegistration struct {
	ClusterName  string // brokerClusterName
	BrokerName   string // the group's name, shared by master and slaves
	BrokerAddr   string // ip:listenPort; slaves read topics at port - 2
	BrokerID     int64  // 0 while master, the broker's id otherwise
	HAServerAddr string // the HA address slaves replicate from
}

// ErrNamesrv: a name server answered a registration with an error code or
// an answer that does not decode. Wrapped with the code and remark.
var ErrNamesrv = errors.New("remoting: name server refused")

// RegisterBrokerBody returns the body of a REGISTER_BROKER request, as
// RegisterBrokerBody.encode(false) writes it (fastjson: members in
// alphabetical order):
//
//	{"filterServerList":[],"topicConfigSerializeWrapper":WRAPPER}
//
// topicWrapper is the broker's TopicConfigSerializeWrapper JSON (what it
// answers to GET_ALL_TOPIC_CONFIG); it must be a JSON object.
func RegisterBrokerBody(topicWrapper []byte) ([]byte, error) {
	if !json.Valid(topicWrapper) || !strings.HasPrefix(strings.TrimSpace(string(topicWrapper)), "{") {
		return nil, fmt.Errorf("%w: the topic config wrapper is not a JSON object", ErrInvalidCommand)
	}
	const head, tail = `{"filterServerList":[],"topicConfigSerializeWrapper":`, `}`
	b := make([]byte, 0, len(head)+len(topicWrapper)+len(tail))
	b = append(b, head...)
	b = append(b, topicWrapper...)
	return append(b, tail...), nil
}

// BodyCRC32 is the bodyCrc32 header field: CRC-32 (IEEE) of the body
// masked with 0x7FFFFFFF (UtilAll.crc32). A name server that receives a
// non-zero value different from its own refuses the registration.
func BodyCRC32(body []byte) int32 {
	return int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF)
}

// NewRegisterBroker returns the REGISTER_BROKER (103) request of r with
// body (RegisterBrokerBody's output), in a JSON header as RocketMQ's
// default, language GO, version RegisterVersion. Its ext fields are those
// of RocketMQ 5's RegisterBrokerRequestHeader, every non-null member as a
// string: brokerAddr, brokerId, brokerName, clusterName, haServerAddr,
// enableActingMaster ("false"), compressed ("false": the body is plain
// JSON) and bodyCrc32 (BodyCRC32(body)). heartbeatTimeoutMillis is sent
// only in acting-master mode, which replicator does not run.
func NewRegisterBroker(r BrokerRegistration, body []byte) (*Command, error) {
	if err := r.check(true); err != nil {
		return nil, err
	}
	c := r.command(RegisterBroker)
	c.ExtFields["haServerAddr"] = r.HAServerAddr
	c.ExtFields["enableActingMaster"] = "false"
	c.ExtFields["compressed"] = "false"
	c.ExtFields["bodyCrc32"] = strconv.FormatInt(int64(BodyCRC32(body)), 10)
	c.Body = body
	return c, nil
}

// NewUnregisterBroker returns the UNREGISTER_BROKER (104) request of r
// (UnRegisterBrokerRequestHeader: brokerAddr, brokerId, brokerName,
// clusterName; no body).
func NewUnregisterBroker(r BrokerRegistration) (*Command, error) {
	if err := r.check(false); err != nil {
		return nil, err
	}
	return r.command(UnregisterBroker), nil
}

// command is a JSON-header request of code with the ext fields both
// requests carry: brokerAddr, brokerId, brokerName and clusterName.
func (r BrokerRegistration) command(code int32) *Command {
	return &Command{
		Code:     code,
		Language: LanguageGo,
		Version:  RegisterVersion,
		ExtFields: map[string]string{
			"brokerAddr":  r.BrokerAddr,
			"brokerId":    strconv.FormatInt(r.BrokerID, 10),
			"brokerName":  r.BrokerName,
			"clusterName": r.ClusterName,
		},
		Serialize: JSON,
	}
}

func (r BrokerRegistration) check(ha bool) error {
	switch {
	case r.ClusterName == "" || r.BrokerName == "" || r.BrokerAddr == "":
		return fmt.Errorf("%w: cluster name, broker name and broker address are required", ErrInvalidCommand)
	case ha && r.HAServerAddr == "":
		return fmt.Errorf("%w: the HA server address is required", ErrInvalidCommand)
	case r.BrokerID < 0:
		return fmt.Errorf("%w: broker id %d", ErrInvalidCommand, r.BrokerID)
	}
	return nil
}

// RegisterResult is a name server's answer to REGISTER_BROKER
// (RegisterBrokerResponseHeader): for a broker id other than 0, the
// address and HA address of the group's id-0 broker when that one is
// registered and alive; "" otherwise. The body (the order-topic KV table)
// is not used.
type RegisterResult struct {
	MasterAddr   string
	HAServerAddr string
}

// ParseRegisterResponse checks a name server's answer to REGISTER_BROKER
// or UNREGISTER_BROKER: SUCCESS, with addresses of at most
// MaxNamesrvAddrLen bytes. Errors wrap ErrNamesrv.
func ParseRegisterResponse(resp *Command) (RegisterResult, error) {
	if resp.Code != Success {
		return RegisterResult{}, fmt.Errorf("%w: code %d, remark %q", ErrNamesrv, resp.Code, truncate(resp.Remark))
	}
	res := RegisterResult{MasterAddr: resp.ExtFields["masterAddr"], HAServerAddr: resp.ExtFields["haServerAddr"]}
	for _, a := range []string{res.MasterAddr, res.HAServerAddr} {
		if len(a) > MaxNamesrvAddrLen {
			return RegisterResult{}, fmt.Errorf("%w: an address of %d bytes in the answer (at most %d)", ErrNamesrv, len(a), MaxNamesrvAddrLen)
		}
	}
	return res, nil
}

// ParseNamesrvAddrs splits a name-server list as RocketMQ's namesrvAddr
// ("host:port;host:port"); "," separates too. Empty items are skipped.
func ParseNamesrvAddrs(s string) []string {
	var out []string
	for _, it := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' }) {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}
