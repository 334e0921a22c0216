// Package storetest is the conformance suite of the sdk/store.Store
// contract. A store author runs it from a test against their
// implementation, directly and through the plugin boundary:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, dir string, segSize int64) store.Store {
//			st, err := mystore.Open(dir, segSize)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return st
//		})
//	}
//
//	func TestConformancePlugin(t *testing.T) {
//		storetest.Run(t, storetest.PluginFactory(opener, storeplugin.ClientConfig{}))
//	}
//
// It covers appends (results, queue offsets, concurrency), raw appends at
// the max offset (the slave path), reads (views, never across a segment end),
// record decoding across segment boundaries and end-of-file fillers,
// truncation, the sentinel errors, Watch, Close and recovery after a
// restart, of a log written by Append and of a replica written by AppendAt.
// Through PluginFactory, with a store that implements
// storeplugin.SegmentFiles, the replica is written by the host's in-place
// writes into the plugin's files: the replica restart case checks the
// store meets that contract (see storeplugin.SegmentFiles). Every subtest
// works in its own t.TempDir.
package storetest
