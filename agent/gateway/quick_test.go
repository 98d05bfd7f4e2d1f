package gateway

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// quickSeeds are requests of the plain shape and near misses of it.
var quickSeeds = []string{
	`{"model":"tiny","messages":[{"role":"user","content":"stream 12"}],"stream":true}`,
	" {\n \"messages\" : [ {\"role\":\"system\",\"content\":\"be brief\"} , {\"content\":\"naïve ☃ 🦙\",\"role\":\"user\"} ],\t\"model\":\"llama3.2:1b\",\"stream\":false}\r\n",
	// As the official SDKs send one: options, sampling numbers, a limit, members the agent
	// does not read, escapes in the content.
	`{"messages":[{"role":"system","content":"You are helpful.\nBe brief."},{"role":"user","content":"hi \u00e9 \"q\" \/ \\"}],"model":"tiny","max_tokens":64,"stream":true,"stream_options":{"include_usage":true},"temperature":0.7,"top_p":1,"n":1,"user":"u-1","frequency_penalty":0,"presence_penalty":-0.5e1,"logprobs":false,"seed":null,"top_k":-40,"max_completion_tokens":null}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.0}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1e3}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-0}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1e400}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"0.5"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":01}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":.5}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1.}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1E+2,"top_p":-0.0}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.5,"temperature":1}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"n":null,"stream_options":null}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":1}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true,"include_usage":false}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"other":true}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"Max_Tokens":3}`,
	"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"\u017ftream\":true}",
	"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_\u212a\":3}",
	`{"model":"m","messages":[{"role":"user","content":"x"}],"user":{"id":1}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"user":"a\qb"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"user":"ok\tok","metadata":null,"logprobs":true}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"logit_bias":{}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":null}`,
	`{"model":"m","messages":[{"role":"user","content":"\u00zz"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"\ud83e\udd99 and a lone \ud800"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x\`,
	`{"model":"m","messages":[{"role":"user","content":"x\u12"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"user":"x\`,
	"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"raw \xff byte and \\n\"}]}",
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
	for _, body := range quickSeeds[:3] {
		var req oaRequest
		if !quickOARequest([]byte(body), &req) {
			t.Fatalf("quick read refused %q", body)
		}
		got, f := parseOpenAI([]byte(body))
		if f != nil {
			t.Fatalf("%q: %v", body, f.msg)
		}
		// The same request with a member the quick read does not take, to no effect.
		slow := trimRightBrace(body) + `,"response_format":{"type":"text"}}`
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

// modelDecided are requests quickModel reads itself, modelLeft near misses it leaves to
// encoding/json.
var (
	modelDecided = []string{
		`{"model":"tiny","messages":[{"role":"user","content":"prompt number 5"}],"stream":true,"max_tokens":1}`,
		`{"messages":[{"role":"user","content":"a \"quoted\" [word] {x}\\"}],"stream":false,"options":{"num_predict":-1.5e3,"stop":["}",null,true]},"model":"llama3.2:1b"}`,
		" {\n \"model\" : \"m\" ,\t\"n\": [ 1 , 2 ] }\r\n",
		`{"model":"a","model":"b"}`,
		`{"model":"a","model":null}`,
		`{"model":null}`,
		`{"model":""}`,
		"{\"model\":\"m\",\"x\":\"bad \xff\"}",
		`{}`,
	}
	modelLeft = []string{
		`{"model":5}`,
		`{"model":["a"]}`,
		`{"Model":"m"}`,
		`{"model":"m","MODEL":"n"}`,
		`{"mod\u0065l":"m"}`,
		`{"model":"m\u00e9"}`,
		"{\"model\":\"bad \xff utf8\"}",
		`{"model":"m"} {}`,
		`{"model":"m",}`,
		`{"model":"m"`,
		`[]`,
		`"model"`,
		`null`,
		``,
	}
)

// FuzzQuickModel: what quickModel decides is what json.Unmarshal reads into a struct of the
// one field, and modelName answers as json.Unmarshal alone would.
func FuzzQuickModel(f *testing.F) {
	for _, s := range slices.Concat(modelDecided, modelLeft, quickSeeds) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var m struct {
			Model string `json:"model"`
		}
		err := json.Unmarshal(body, &m)
		got, ok := modelName(body)
		if want := err == nil && m.Model != ""; ok != want || (ok && got != m.Model) {
			t.Fatalf("modelName(%q) = %q, %v; json.Unmarshal: %q, %v", body, got, ok, m.Model, err)
		}
		quick, decided := quickModel(body)
		if decided && (err != nil || quick != m.Model) {
			t.Fatalf("quickModel(%q) decided %q; json.Unmarshal: %q, %v", body, quick, m.Model, err)
		}
	})
}

// TestQuickModelDecidesPlainRequests: the requests clients send are decided without
// encoding/json (else the forwarder would silently pay for it again), in any spacing.
func TestQuickModelDecidesPlainRequests(t *testing.T) {
	for _, body := range slices.Concat(modelDecided, quickSeeds[:2]) {
		if _, decided := quickModel([]byte(body)); !decided {
			t.Errorf("quickModel left %q to encoding/json", body)
		}
	}
	for _, body := range modelLeft {
		if _, decided := quickModel([]byte(body)); decided {
			t.Errorf("quickModel decided %q", body)
		}
	}
}
