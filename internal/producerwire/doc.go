// Package producerwire encodes and decodes the batch messages of the
// producer stream (sdk/proto/producerv1: PutRequest and PutResponse) by
// hand, with google.golang.org/protobuf/encoding/protowire: no reflection,
// message bodies aliased from the received bytes rather than copied, and
// no allocation per result. The bytes are the protobuf encoding of
// producer.proto, field for field; internal/api (the node) and client (the
// producer) use it as the stream's gRPC codec, so a peer that uses the
// generated code or any other protobuf implementation sees no difference.
//
// A PutRequest is the concatenation of its elements, each a length-
// delimited field 1 holding one Message:
//
//	0x0a <varint len> [ 0x08 <varint sequence> ]
//	                  [ 0x12 <varint len> topic ]
//	                  [ 0x18 <varint queue_id> ]
//	                  [ 0x22 <varint len> body ]
//	                  ( 0x2a <varint len> [ 0x0a <len> key ] [ 0x12 <len> value ] )*
//
// and a PutResponse likewise of field 1 elements holding one Result
// (fields 1 to 11 of producer.proto, varints except message and
// master_api). Decoding accepts whatever protobuf-go accepts (fields in
// any order, repeated scalars last-wins, unknown fields and groups
// skipped) and refuses what it refuses (truncation, bad tags, invalid
// UTF-8 in a string): FuzzDecodeRequest and FuzzDecodeResponse check that
// against protobuf-go itself.
package producerwire
