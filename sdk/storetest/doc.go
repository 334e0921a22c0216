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
//		storetest.Run(t, storetest.ProcessFactory(t, "", storeplugin.ClientConfig{}))
//	}
//
//	func TestMain(m *testing.M) {
//		storetest.ServeInTestMain(opener) // the test binary is its own plugin
//		os.Exit(m.Run())
//	}
//
// ProcessFactory runs every store in a plugin process and reaches it
// through the host's client (storeplugin.Client), as the daemon
// does; PluginFactory serves the plugin's gRPC shim in the test's own
// process (no binary needed). Across the boundary the contract is this
// interface alone: the host never reads or writes the plugin's files.
//
// It covers appends (results, queue offsets, concurrency), raw appends at
// the max offset (the slave path), reads (views, never across a segment end),
// record decoding across segment boundaries and end-of-file fillers,
// truncation, the sentinel errors, Watch, Close and recovery after a
// restart, of a log written by Append and of a replica written by AppendAt.
// Every subtest works in its own t.TempDir.
package storetest
