package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// errNotPutOK marks a write stored on the leader whose status is not PUT_OK.
var errNotPutOK = errors.New("stored on the leader, not confirmed by a follower")

// client is the put/get/delete/status commands.
type client struct {
	addr    string
	timeout time.Duration
}

func (c client) do(cmd string, args []string, out io.Writer) error {
	hc := &http.Client{Timeout: c.timeout}
	base := "http://" + c.addr
	var req *http.Request
	var err error
	switch cmd {
	case "put":
		req, err = http.NewRequest(http.MethodPut, base+"/v1/keys/"+url.PathEscape(args[0]), bytes.NewReader([]byte(args[1])))
	case "delete":
		req, err = http.NewRequest(http.MethodDelete, base+"/v1/keys/"+url.PathEscape(args[0]), nil)
	case "get":
		req, err = http.NewRequest(http.MethodGet, base+"/v1/keys/"+url.PathEscape(args[0]), nil)
	case "status":
		req, err = http.NewRequest(http.MethodGet, base+"/v1/status", nil)
	}
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueSize+1))
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %w", cmd, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s (HTTP %d)", cmd, e.Error, resp.StatusCode)
		}
		return fmt.Errorf("%s: HTTP %d", cmd, resp.StatusCode)
	}
	switch cmd {
	case "get":
		_, err = fmt.Fprintf(out, "%s\n", body)
		return err
	case "status":
		_, err = out.Write(body)
		return err
	}
	var res writeResult
	if err := json.Unmarshal(body, &res); err != nil {
		return fmt.Errorf("%s: bad answer %q: %w", cmd, body, err)
	}
	fmt.Fprintf(out, "%s offset=%d next_offset=%d\n", res.Status, res.Offset, res.NextOffset)
	if res.Status != "PUT_OK" {
		return fmt.Errorf("%s: %s: %w", cmd, res.Status, errNotPutOK)
	}
	return nil
}
