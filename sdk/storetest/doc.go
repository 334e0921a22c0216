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
// restart. Every subtest works in its own t.TempDir.
package storetest
