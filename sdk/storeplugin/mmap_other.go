//go:build !unix

package storeplugin

// Without mmap, reads always use ReadStream.
const mmapSupported = false

func newMmapReader(c *Client) reader { return newStreamReader(c) }
