// Package interop checks replicator against peers it did not write: an
// independent Java implementation of RocketMQ 4.x's classic HA protocol
// (java/HaSlave.java, java/HaMaster.java, compiled with javac by the tests)
// and, when ROCKETMQ_HOME points at an unpacked RocketMQ 4.9 binary
// distribution, real RocketMQ brokers. The package holds only tests; see
// README.md for what each test proves and how to run it.
//
// The protocol under test, big-endian on the wire:
//
//	slave -> master   [max offset int64]                      request, then acks
//	master -> slave   [offset int64][size int32][size bytes]  size <= 32 KiB, 0 = heartbeat
//
// and the commit-log layout both sides must share: segment files named by
// their start offset in 20 digits, all of one size, records in RocketMQ
// message format v1, the 8-byte end-of-file filler [remaining int32]
// [0xCBD43194] where a record plus 8 bytes does not fit a segment's rest.
// Every test compares commit-log files byte for byte.
//
// RocketMQ 5's controller-mode ("AutoSwitch") protocol has its own
// independent Java peers (java/AutoSwitchMaster.java,
// java/AutoSwitchSlave.java), proven against each other
// (TestAutoSwitchJavaPeers) and then against replicator both ways
// (TestAutoSwitchInterop), truncation to the consistent point included:
//
//	slave -> master   [1][syncFromLastFile i16][asyncLearner i16][brokerId i64]   handshake
//	                  [2][max offset i64]                                          acks
//	master -> slave   [1][12N][max offset i64][last epoch i32] N x [epoch i32][start i64]
//	                  [2][size i32][offset i64][epoch i32][epoch start i64][confirm i64][body]
//
// java/StoreReader.java is an independent reader of a RocketMQ 4.9 store
// directory that applies a broker's loading and recovery rules (segment
// names and lengths, abort and checkpoint, magic codes, the filler, body
// CRC, rebuilt consume queues, config managers); TestRocketMQStoreReader
// opens directories replicator left (cleanly stopped, killed under load)
// with it and compares what it recovers with what replicator serves.
//
// java/NameServer.java is an independent RocketMQ name server's broker
// registry (REGISTER_BROKER 103, UNREGISTER_BROKER 104, RouteInfoManager's
// masterAddr rule); TestJavaNameServer has `replicator master
// --namesrv-addr` register with it and java/RemotingSlave.java --namesrv
// find the master through it and sync its metadata, as a RocketMQ slave.
package interop
