package producerwire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of producer.proto.
const (
	fieldRequestMessages = 1 // PutRequest.messages

	fieldMsgSequence   = 1 // Message.sequence
	fieldMsgTopic      = 2 // Message.topic
	fieldMsgQueueID    = 3 // Message.queue_id
	fieldMsgBody       = 4 // Message.body
	fieldMsgProperties = 5 // Message.properties (map entry: key 1, value 2)

	fieldResponseResults = 1 // PutResponse.results

	fieldResSequence    = 1
	fieldResStorage     = 2
	fieldResStatus      = 3
	fieldResOffset      = 4
	fieldResNextOffset  = 5
	fieldResQueueOffset = 6
	fieldResError       = 7
	fieldResMessage     = 8
	fieldResMasterAPI   = 9
	fieldResEpoch       = 10
	fieldResBrokerID    = 11
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed protobuf")

// ErrTooManyMessages is wrapped by DecodeRequest's error for a batch over
// its message bound.
var ErrTooManyMessages = errors.New("too many messages in a batch")

// Message is one decoded producer message. Body aliases the decoded bytes;
// Topic and Properties are copies.
type Message struct {
	Sequence   uint64
	Topic      string
	QueueID    int32
	Body       []byte
	Properties map[string]string // nil when the message has none
}

// Decoder decodes the PutRequests of one stream. It keeps the last topic
// it saw, so that a batch of messages to one topic allocates that topic's
// string once. The zero value is ready; a Decoder is not safe for
// concurrent use.
type Decoder struct {
	topic string
}

// DecodeRequest decodes a PutRequest from b, appending its messages to dst
// (which it returns). It takes at most maxMessages messages: one more
// fails with an error wrapping ErrTooManyMessages, before anything of it
// is allocated. A batch that gRPC's proto codec (protobuf-go) would refuse
// fails with an error wrapping ErrMalformed; the messages appended to dst
// are then meaningless. The bodies alias b.
func (d *Decoder) DecodeRequest(b []byte, dst []Message, maxMessages int) ([]Message, error) {
	err := eachField(b, "PutRequest", func(f field) error {
		if f.num != fieldRequestMessages || f.typ != protowire.BytesType {
			return nil
		}
		if len(dst) >= maxMessages {
			return fmt.Errorf("%w: more than %d", ErrTooManyMessages, maxMessages)
		}
		dst = append(dst, Message{})
		return d.decodeMessage(f.b, &dst[len(dst)-1])
	})
	return dst, err
}

func (d *Decoder) decodeMessage(b []byte, m *Message) error {
	return eachField(b, "Message", func(f field) error {
		switch {
		case f.num == fieldMsgSequence && f.typ == protowire.VarintType:
			m.Sequence = f.v
		case f.num == fieldMsgQueueID && f.typ == protowire.VarintType:
			m.QueueID = int32(f.v)
		case f.num == fieldMsgTopic && f.typ == protowire.BytesType:
			if string(f.b) != d.topic {
				if !utf8.Valid(f.b) {
					return fmt.Errorf("%w: Message.topic: invalid UTF-8", ErrMalformed)
				}
				d.topic = string(f.b)
			}
			m.Topic = d.topic
		case f.num == fieldMsgBody && f.typ == protowire.BytesType:
			m.Body = f.b
		case f.num == fieldMsgProperties && f.typ == protowire.BytesType:
			k, val, err := decodeMapEntry(f.b)
			if err != nil {
				return err
			}
			if m.Properties == nil {
				m.Properties = make(map[string]string, 2)
			}
			m.Properties[k] = val
		}
		return nil
	})
}

// decodeMapEntry decodes a map<string, string> entry.
func decodeMapEntry(b []byte) (key, val string, err error) {
	err = eachField(b, "Message.properties", func(f field) error {
		if (f.num != 1 && f.num != 2) || f.typ != protowire.BytesType {
			return nil
		}
		if !utf8.Valid(f.b) {
			return fmt.Errorf("%w: Message.properties: invalid UTF-8", ErrMalformed)
		}
		if f.num == 1 {
			key = string(f.b)
		} else {
			val = string(f.b)
		}
		return nil
	})
	return key, val, err
}

// field is one field eachField decoded: a varint's value (v) or a
// length-delimited field's contents (b, aliasing the message).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// eachField calls f with each varint and length-delimited field of the
// message b in order, and skips fields of the other wire types as
// protobuf-go skips unknown fields; a truncated or invalid field fails
// with an error wrapping ErrMalformed that names the message (what).
func eachField(b []byte, what string, f func(field) error) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return malformed(what, n)
		}
		b = b[n:]
		fl := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			fl.v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			fl.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return malformed(what, n)
		}
		b = b[n:]
		if typ != protowire.VarintType && typ != protowire.BytesType {
			continue
		}
		if err := f(fl); err != nil {
			return err
		}
	}
	return nil
}

// consumeTag is protowire.ConsumeTag, also refusing field numbers over
// protowire.MaxValidNumber as protobuf-go does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

func malformed(what string, n int) error {
	return fmt.Errorf("%w: %s: %w", ErrMalformed, what, protowire.ParseError(n))
}

// SizeMessage is the encoded size of a Message (without its field tag and
// length in the PutRequest).
func SizeMessage(seq uint64, topic string, queueID int32, body []byte, props map[string]string) int {
	n := 0
	if seq != 0 {
		n += 1 + protowire.SizeVarint(seq)
	}
	if topic != "" {
		n += 1 + protowire.SizeBytes(len(topic))
	}
	if queueID != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(queueID)))
	}
	if len(body) > 0 {
		n += 1 + protowire.SizeBytes(len(body))
	}
	for k, v := range props {
		n += 1 + protowire.SizeBytes(sizeMapEntry(k, v))
	}
	return n
}

func sizeMapEntry(k, v string) int {
	return 1 + protowire.SizeBytes(len(k)) + 1 + protowire.SizeBytes(len(v))
}

// SizeRequestMessage is what AppendRequestMessage appends.
func SizeRequestMessage(seq uint64, topic string, queueID int32, body []byte, props map[string]string) int {
	return 1 + protowire.SizeBytes(SizeMessage(seq, topic, queueID, body, props))
}

// AppendRequestMessage appends one element of PutRequest.messages to b: a
// PutRequest is the concatenation of its elements. Fields with zero
// values are left out, as protobuf-go does; properties go in map order.
func AppendRequestMessage(b []byte, seq uint64, topic string, queueID int32, body []byte, props map[string]string) []byte {
	b = protowire.AppendTag(b, fieldRequestMessages, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(SizeMessage(seq, topic, queueID, body, props)))
	if seq != 0 {
		b = protowire.AppendTag(b, fieldMsgSequence, protowire.VarintType)
		b = protowire.AppendVarint(b, seq)
	}
	if topic != "" {
		b = protowire.AppendTag(b, fieldMsgTopic, protowire.BytesType)
		b = protowire.AppendString(b, topic)
	}
	if queueID != 0 {
		b = protowire.AppendTag(b, fieldMsgQueueID, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(queueID)))
	}
	if len(body) > 0 {
		b = protowire.AppendTag(b, fieldMsgBody, protowire.BytesType)
		b = protowire.AppendBytes(b, body)
	}
	for k, v := range props {
		b = protowire.AppendTag(b, fieldMsgProperties, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeMapEntry(k, v)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return b
}

// Result is one producerv1.Result; the enums are their wire values.
type Result struct {
	Sequence    uint64
	Storage     int32
	Status      int32
	Offset      int64
	NextOffset  int64
	QueueOffset int64
	Error       int32
	Message     string
	MasterAPI   string
	Epoch       int32
	BrokerID    int64
}

func sizeResult(r *Result) int {
	n := 0
	vi := func(v uint64) {
		if v != 0 {
			n += 1 + protowire.SizeVarint(v)
		}
	}
	vi(r.Sequence)
	vi(uint64(int64(r.Storage)))
	vi(uint64(int64(r.Status)))
	vi(uint64(r.Offset))
	vi(uint64(r.NextOffset))
	vi(uint64(r.QueueOffset))
	vi(uint64(int64(r.Error)))
	if r.Message != "" {
		n += 1 + protowire.SizeBytes(len(r.Message))
	}
	if r.MasterAPI != "" {
		n += 1 + protowire.SizeBytes(len(r.MasterAPI))
	}
	vi(uint64(int64(r.Epoch)))
	vi(uint64(r.BrokerID))
	return n
}

// AppendResult appends one element of PutResponse.results to b: a
// PutResponse is the concatenation of its elements.
func AppendResult(b []byte, r *Result) []byte {
	b = protowire.AppendTag(b, fieldResponseResults, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeResult(r)))
	vi := func(num protowire.Number, v uint64) {
		if v != 0 {
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	str := func(num protowire.Number, s string) {
		if s != "" {
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendString(b, s)
		}
	}
	vi(fieldResSequence, r.Sequence)
	vi(fieldResStorage, uint64(int64(r.Storage)))
	vi(fieldResStatus, uint64(int64(r.Status)))
	vi(fieldResOffset, uint64(r.Offset))
	vi(fieldResNextOffset, uint64(r.NextOffset))
	vi(fieldResQueueOffset, uint64(r.QueueOffset))
	vi(fieldResError, uint64(int64(r.Error)))
	str(fieldResMessage, r.Message)
	str(fieldResMasterAPI, r.MasterAPI)
	vi(fieldResEpoch, uint64(int64(r.Epoch)))
	vi(fieldResBrokerID, uint64(r.BrokerID))
	return b
}

// DecodeResponse decodes a PutResponse from b, appending its results to
// dst (which it returns); each result takes at least two bytes of b, so
// len(b)/2 bounds what it appends. A response that protobuf-go would
// refuse fails with an error wrapping ErrMalformed.
func DecodeResponse(b []byte, dst []Result) ([]Result, error) {
	err := eachField(b, "PutResponse", func(f field) error {
		if f.num != fieldResponseResults || f.typ != protowire.BytesType {
			return nil
		}
		dst = append(dst, Result{})
		return decodeResult(f.b, &dst[len(dst)-1])
	})
	return dst, err
}

func decodeResult(b []byte, r *Result) error {
	return eachField(b, "Result", func(f field) error {
		if f.typ == protowire.BytesType {
			if f.num != fieldResMessage && f.num != fieldResMasterAPI {
				return nil
			}
			if !utf8.Valid(f.b) {
				return fmt.Errorf("%w: Result: invalid UTF-8", ErrMalformed)
			}
			if f.num == fieldResMessage {
				r.Message = string(f.b)
			} else {
				r.MasterAPI = string(f.b)
			}
			return nil
		}
		v := f.v
		switch f.num {
		case fieldResSequence:
			r.Sequence = v
		case fieldResStorage:
			r.Storage = int32(v)
		case fieldResStatus:
			r.Status = int32(v)
		case fieldResOffset:
			r.Offset = int64(v)
		case fieldResNextOffset:
			r.NextOffset = int64(v)
		case fieldResQueueOffset:
			r.QueueOffset = int64(v)
		case fieldResError:
			r.Error = int32(v)
		case fieldResEpoch:
			r.Epoch = int32(v)
		case fieldResBrokerID:
			r.BrokerID = int64(v)
		}
		return nil
	})
}
