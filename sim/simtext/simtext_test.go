package simtext

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestGenerateDeterministic(t *testing.T) {
	a := Generate(7, "hello", 40)
	b := Generate(7, "hello", 40)
	if strings.Join(a, "") != strings.Join(b, "") {
		t.Fatalf("same seed and prompt differ:\n%q\n%q", a, b)
	}
	if len(a) != 40 {
		t.Fatalf("got %d tokens, want 40", len(a))
	}
	if c := Generate(8, "hello", 40); strings.Join(a, "") == strings.Join(c, "") {
		t.Fatal("different seeds gave the same text")
	}
	if c := Generate(7, "hello!", 40); strings.Join(a, "") == strings.Join(c, "") {
		t.Fatal("different prompts gave the same text")
	}
}

func TestGeneratePrefix(t *testing.T) {
	long := Generate(0, "p", 30)
	short := Generate(0, "p", 10)
	for i := range short {
		if short[i] != long[i] {
			t.Fatalf("token %d: short %q long %q", i, short[i], long[i])
		}
	}
}

func TestGenerateShape(t *testing.T) {
	toks := Generate(3, "shape", 500)
	if !strings.HasPrefix(toks[0], " ") {
		t.Fatalf("first token %q is not a word", toks[0])
	}
	for i, tok := range toks {
		if tok == "" {
			t.Fatalf("empty token at %d", i)
		}
		if isPunct(tok) && i > 0 && isPunct(toks[i-1]) {
			t.Fatalf("two punctuation tokens in a row at %d", i)
		}
	}
	if Generate(0, "x", 0) != nil || Generate(0, "x", -1) != nil {
		t.Fatal("n <= 0 must give no tokens")
	}
}

func TestCountTokens(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int
	}{{"", 0}, {"a", 1}, {"abcd", 1}, {"abcde", 2}, {strings.Repeat("x", 8192), 2048}} {
		if got := CountTokens(c.s); got != c.want {
			t.Errorf("CountTokens(%d bytes) = %d, want %d", len(c.s), got, c.want)
		}
	}
}

func TestAnswerLength(t *testing.T) {
	seen := map[int]bool{}
	for i := range 200 {
		n := AnswerLength(int64(i), "prompt")
		if n < MinAnswer || n > MaxAnswer {
			t.Fatalf("AnswerLength = %d, outside [%d, %d]", n, MinAnswer, MaxAnswer)
		}
		if n != AnswerLength(int64(i), "prompt") {
			t.Fatal("AnswerLength is not deterministic")
		}
		seen[n] = true
	}
	if len(seen) < 10 {
		t.Fatalf("AnswerLength takes only %d values over 200 seeds", len(seen))
	}
}

func TestFromSchema(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]},"days":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["city"]}`: `{"city":"Paris","days":1,"tags":["sim"]}`,
		`{"type":"boolean"}`: `true`,
		``:                   `{"answer":"sim"}`,
		`{"properties":{}}`:  `{}`,
	} {
		got := FromSchema(json.RawMessage(schema))
		if got != want {
			t.Errorf("FromSchema(%s) = %s, want %s", schema, got, want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("FromSchema(%s) = %s: not JSON", schema, got)
		}
	}
	if got := strings.Join(Pieces(`{"city":"Paris"}`), ""); got != `{"city":"Paris"}` {
		t.Errorf("Pieces lose text: %s", got)
	}
}
