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
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return dst, malformed("PutRequest", n)
		}
		b = b[n:]
		if num == fieldRequestMessages && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return dst, malformed("PutRequest.messages", n)
			}
			b = b[n:]
			if len(dst) >= maxMessages {
				return dst, fmt.Errorf("%w: more than %d", ErrTooManyMessages, maxMessages)
			}
			dst = append(dst, Message{})
			if err := d.decodeMessage(v, &dst[len(dst)-1]); err != nil {
				return dst, err
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return dst, malformed("PutRequest", n)
		}
		b = b[n:]
	}
	return dst, nil
}

func (d *Decoder) decodeMessage(b []byte, m *Message) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return malformed("Message", n)
		}
		b = b[n:]
		switch {
		case num == fieldMsgSequence && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return malformed("Message.sequence", n)
			}
			m.Sequence, b = v, b[n:]
			continue
		case num == fieldMsgQueueID && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return malformed("Message.queue_id", n)
			}
			m.QueueID, b = int32(v), b[n:]
			continue
		case num == fieldMsgTopic && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("Message.topic", n)
			}
			b = b[n:]
			if string(v) != d.topic {
				if !utf8.Valid(v) {
					return fmt.Errorf("%w: Message.topic: invalid UTF-8", ErrMalformed)
				}
				d.topic = string(v)
			}
			m.Topic = d.topic
			continue
		case num == fieldMsgBody && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("Message.body", n)
			}
			m.Body, b = v, b[n:]
			continue
		case num == fieldMsgProperties && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("Message.properties", n)
			}
			b = b[n:]
			k, val, err := decodeMapEntry(v)
			if err != nil {
				return err
			}
			if m.Properties == nil {
				m.Properties = make(map[string]string, 2)
			}
			m.Properties[k] = val
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return malformed("Message", n)
		}
		b = b[n:]
	}
	return nil
}

// decodeMapEntry decodes a map<string, string> entry.
func decodeMapEntry(b []byte) (key, val string, err error) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return "", "", malformed("Message.properties", n)
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", "", malformed("Message.properties", n)
			}
			b = b[n:]
			if !utf8.Valid(v) {
				return "", "", fmt.Errorf("%w: Message.properties: invalid UTF-8", ErrMalformed)
			}
			if num == 1 {
				key = string(v)
			} else {
				val = string(v)
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", "", malformed("Message.properties", n)
		}
		b = b[n:]
	}
	return key, val, nil
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
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return dst, malformed("PutResponse", n)
		}
		b = b[n:]
		if num == fieldResponseResults && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return dst, malformed("PutResponse.results", n)
			}
			b = b[n:]
			dst = append(dst, Result{})
			if err := decodeResult(v, &dst[len(dst)-1]); err != nil {
				return dst, err
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return dst, malformed("PutResponse", n)
		}
		b = b[n:]
	}
	return dst, nil
}

func decodeResult(b []byte, r *Result) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return malformed("Result", n)
		}
		b = b[n:]
		if typ == protowire.VarintType && num >= fieldResSequence && num <= fieldResBrokerID && num != fieldResMessage && num != fieldResMasterAPI {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return malformed("Result", n)
			}
			b = b[n:]
			switch num {
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
			continue
		}
		if typ == protowire.BytesType && (num == fieldResMessage || num == fieldResMasterAPI) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformed("Result", n)
			}
			b = b[n:]
			if !utf8.Valid(v) {
				return fmt.Errorf("%w: Result: invalid UTF-8", ErrMalformed)
			}
			if num == fieldResMessage {
				r.Message = string(v)
			} else {
				r.MasterAPI = string(v)
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return malformed("Result", n)
		}
		b = b[n:]
	}
	return nil
}
