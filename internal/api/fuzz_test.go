package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzPut sends arbitrary topics, query strings, property headers and bodies
// to the put handler: it never panics, always answers JSON with one of the
// documented codes, and writes nothing unless it answers 200.
func FuzzPut(f *testing.F) {
	f.Add("TopicTest", "queue=1&tags=a&keys=k", "color=blue, size=10", []byte("hello"))
	f.Add("bad topic", "", "", []byte("x"))
	f.Add("T", "queue=-1", "", []byte("x"))
	f.Add("T", "tags=x", "TAGS=y", []byte("x"))
	f.Add("T", "", "a=%zz", []byte("x"))
	f.Add("T", "", "k=%01", []byte{})
	f.Add(strings.Repeat("t", 200), "x=1", "novalue", make([]byte, 2000))
	f.Fuzz(func(t *testing.T, topic, query, prop string, body []byte) {
		b := newFake()
		s, err := New(Config{Backend: b, MaxBodyBytes: 1024})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("POST", "/", strings.NewReader(string(body)))
		req.URL.Path = "/v1/topics/" + topic + "/messages"
		req.URL.RawPath = ""
		req.URL.RawQuery = query
		if prop != "" {
			req.Header[PropertyHeader] = []string{prop}
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			if b.count() != 1 {
				t.Fatalf("200 but %d records", b.count())
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusNotFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect:
			if b.count() != 0 {
				t.Fatalf("%d but %d records", rec.Code, b.count())
			}
		default:
			t.Fatalf("unexpected code %d: %s", rec.Code, rec.Body)
		}
		if rec.Code != http.StatusMovedPermanently && rec.Code != http.StatusTemporaryRedirect &&
			rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("code %d without JSON", rec.Code)
		}
	})
}
