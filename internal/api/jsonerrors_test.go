package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAPINetHTTPErrorsAreJSON: the answers net/http writes by itself,
// before any handler (431 for a header block or a query over the limit,
// 400 for a malformed request, 501 for an unknown transfer encoding), are
// JSON like every other answer of the API.
func TestAPINetHTTPErrorsAreJSON(t *testing.T) {
	as := startAbuseServer(t, "", DefaultServerLimits(time.Second))
	for _, tc := range []struct {
		what, req string
		code      int
	}{
		{"huge header", "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("h", 128<<10) + "\r\n\r\n", 431},
		{"huge query", "GET /v1/messages?offset=" + strings.Repeat("1", 128<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", 431},
		{"malformed request line", "GARBAGE\r\n\r\n", 400},
		{"bad host header", "GET /v1/status HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		{"unknown transfer encoding", "POST /v1/topics/T/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked2\r\n\r\n", 501},
	} {
		code, b := rawWithType(t, as.addr, tc.req)
		if code.status != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.what, code.status, b, tc.code)
			continue
		}
		var ea ErrorAnswer
		if code.ctype != "application/json" || json.Unmarshal(b, &ea) != nil || ea.Error == "" {
			t.Errorf("%s: Content-Type %q, body %q: not a JSON error", tc.what, code.ctype, b)
		}
	}
}

type answerHead struct {
	status int
	ctype  string
}

// rawWithType is raw with the answer's Content-Type.
func rawWithType(t *testing.T, addr, req string) (answerHead, []byte) {
	t.Helper()
	var h answerHead
	code, b := rawResp(t, addr, req, func(r *http.Response) { h.ctype = r.Header.Get("Content-Type") })
	h.status = code
	return h, b
}

func TestJSONErrorAnswerLeavesOtherWritesAlone(t *testing.T) {
	for _, b := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nok",
		"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n{}\n",
		"HTTP/1.1 400 Bad Request\r\nX: y\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nno",
		"{\"messages\":[]}",
		"HTTP/1.1 4",
	} {
		if _, ok := jsonErrorAnswer([]byte(b)); ok {
			t.Errorf("rewrote %q", b)
		}
	}
	out, ok := jsonErrorAnswer([]byte("HTTP/1.1 431 Request Header Fields Too Large" + netHTTPErrorHeaders + "431 Request Header Fields Too Large"))
	want := "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: application/json\r\nContent-Length: 48\r\nConnection: close\r\n\r\n{\"error\":\"431 Request Header Fields Too Large\"}\n"
	if !ok || string(out) != want {
		t.Fatalf("got %q", out)
	}
}

// FuzzJSONErrorAnswer: whatever bytes a write carries, the rewrite either
// leaves them alone or yields one HTTP answer with the same status and a
// JSON error body of the stated length.
func FuzzJSONErrorAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 431 Request Header Fields Too Large" + netHTTPErrorHeaders + "431 Request Header Fields Too Large"))
	f.Add([]byte("HTTP/1.1 400 Bad Request: malformed Host header" + netHTTPErrorHeaders + "400 Bad Request: malformed Host header"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, ok := jsonErrorAnswer(b)
		if !ok {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("rewrote %q into an unreadable answer %q: %v", b, out, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var ea ErrorAnswer
		if json.Unmarshal(body, &ea) != nil || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("rewrote %q into %q: not a JSON error", b, out)
		}
		if want := string(b[9:12]); strconv.Itoa(resp.StatusCode) != want {
			t.Fatalf("status %d, want %s", resp.StatusCode, want)
		}
	})
}
