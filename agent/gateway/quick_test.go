package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
)

// quickSeeds are requests of the plain shape and near misses of it.
var quickSeeds = []string{
	`{"model":"tiny","messages":[{"role":"user","content":"stream 12"}],"stream":true}`,
	" {\n \"messages\" : [ {\"role\":\"system\",\"content\":\"be brief\"} , {\"content\":\"naïve ☃ 🦙\",\"role\":\"user\"} ],\t\"model\":\"llama3.2:1b\",\"stream\":false}\r\n",
	`{"model":"m","messages":[{}]}`,
	`{"model":"","messages":[{"role":"user","content":""}]}`,
	`{}`,
	`{"model":"a","model":"b","messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","messages":[{"role":"user","role":"system","content":"x"}]}`,
	`{"Model":"m","messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","messages":[{"ROLE":"user","content":"x"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"say \"hi\"\n"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"bad \xff utf8"}]}`,
	"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"tab\there\"}]}",
	`{"model":"m","messages":[{"role":"user","content":["a"]}]}`,
	`{"model":"m","messages":[{"role":"user","content":null}]}`,
	`{"model":"m","messages":[],"stream":true}`,
	`{"model":"m","messages":null}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"true"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":truex}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":3}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}]} {}`,
	`{"model":"m","messages":[{"role":"user","content":"x"},]}`,
	`{"model":"m",}`,
	`{"model":"m"`,
	`{"model":"m","messages":[{"role":"user","content":"x"}]`,
	`[]`,
	`null`,
	``,
}

// FuzzQuickOARequest: a request the quick read takes is one json.Unmarshal decodes without
// error, to the same value.
func FuzzQuickOARequest(f *testing.F) {
	for _, s := range quickSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var quick oaRequest
		if !quickOARequest(body, &quick) {
			return
		}
		var want oaRequest
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("quick read took %q, which json.Unmarshal refuses: %v", body, err)
		}
		if !reflect.DeepEqual(quick, want) {
			t.Fatalf("%q: quick read %+v, json.Unmarshal %+v", body, quick, want)
		}
		for i, m := range quick.Messages {
			got, err := m.text()
			if err != nil {
				t.Fatalf("%q: message %d: %v", body, i, err)
			}
			var s string
			if len(m.Content) > 0 {
				if err := json.Unmarshal(m.Content, &s); err != nil {
					t.Fatalf("%q: message %d's content %q: %v", body, i, m.Content, err)
				}
			}
			if got != s {
				t.Fatalf("%q: message %d's text %q, json.Unmarshal %q", body, i, got, s)
			}
		}
	})
}

// FuzzPlainString: a string plainString takes is json.Unmarshal's value of it.
func FuzzPlainString(f *testing.F) {
	for _, s := range []string{`"hi"`, `""`, `"a\"b"`, `"\u00e9"`, "\"tab\t\"", `"naïve"`, "\"\xff\"", `"`, `x`, `"a"b"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := plainString(raw)
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal(raw, &want); err != nil || got != want {
			t.Fatalf("plainString(%q) = %q; json.Unmarshal: %q, %v", raw, got, want, err)
		}
	})
}

// TestQuickOARequestTakesPlainRequests: the plain shape takes the quick read (else it would
// silently cost encoding/json again), and what parseOpenAI makes of it is what it makes of the
// same request decoded by encoding/json.
func TestQuickOARequestTakesPlainRequests(t *testing.T) {
	for _, body := range quickSeeds[:2] {
		var req oaRequest
		if !quickOARequest([]byte(body), &req) {
			t.Fatalf("quick read refused %q", body)
		}
		got, f := parseOpenAI([]byte(body))
		if f != nil {
			t.Fatalf("%q: %v", body, f.msg)
		}
		// The same request with a member the quick read does not take (and the engines ignore).
		slow := trimRightBrace(body) + `,"user":"x"}`
		if quickOARequest([]byte(slow), &oaRequest{}) {
			t.Fatalf("quick read took %q", slow)
		}
		want, f := parseOpenAI([]byte(slow))
		if f != nil {
			t.Fatalf("%q: %v", slow, f.msg)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: parsed %+v, by encoding/json %+v", body, got, want)
		}
	}
}

// trimRightBrace is body up to its closing brace, not included.
func trimRightBrace(body string) string {
	for i := len(body) - 1; i >= 0; i-- {
		if body[i] == '}' {
			return body[:i]
		}
	}
	return body
}
