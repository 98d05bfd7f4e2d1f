// Package simtext is the simulators' deterministic text: the same seed and prompt always give the
// same tokens, so tests can assert what a simulated engine answers. It also holds the one token
// count approximation every simulator uses for context limits and prompt_tokens, so the sims
// agree with each other.
package simtext

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
)

// corpus is a small built-in English vocabulary. Punctuation entries are emitted without a
// leading space, like a real tokenizer's separate punctuation tokens.
var corpus = strings.Fields(`the a of and to in is it that for on with as was at by this from
model host memory mesh engine token answer small local network light river stone garden quiet
morning window paper simple clear bright early green open warm steady careful little long
runs waits learns reads writes moves holds keeps builds finds brings shows starts turns
. , . , ;`)

// BytesPerToken is the approximation CountTokens uses: about four bytes of English per token,
// the usual rule of thumb for BPE vocabularies of these models' size.
const BytesPerToken = 4

// CountTokens approximates the number of tokens in s as ceil(len(s) / BytesPerToken), so any
// non-empty text counts at least one token. It is an approximation, not a tokenizer: good enough
// for context limits and usage counts, which is all the simulators need.
func CountTokens(s string) int {
	return (len(s) + BytesPerToken - 1) / BytesPerToken
}

// Generate returns n tokens derived from seed and prompt: word pieces with a leading space
// (" river") or bare punctuation ("."). The same seed and prompt always give the same tokens,
// and the first k tokens of a longer answer equal a shorter answer's, so a limit on the count
// only truncates. n <= 0 gives none.
func Generate(seed int64, prompt string, n int) []string {
	if n <= 0 {
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte(prompt))
	rng := rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
	out := make([]string, 0, n)
	prevPunct := true // the answer starts with a word
	for len(out) < n {
		w := corpus[rng.IntN(len(corpus))]
		punct := isPunct(w)
		if punct && prevPunct {
			continue // never two punctuation marks in a row
		}
		if punct {
			out = append(out, w)
		} else {
			out = append(out, " "+w)
		}
		prevPunct = punct
	}
	return out
}

// AnswerLength is how many tokens an answer to prompt runs before the simulated model ends it on
// its own (an end-of-sequence token): between MinAnswer and MaxAnswer, fixed for a seed and
// prompt. A request's token limit below it cuts the answer short ("length" rather than "stop").
func AnswerLength(seed int64, prompt string) int { return AnswerLengthUpTo(seed, prompt, MaxAnswer) }

// AnswerLengthUpTo is AnswerLength with longest in place of MaxAnswer (a simulator's
// LongestAnswer setting); longest below MinAnswer means MaxAnswer. Benchmarks ask for longer
// answers than the default's to measure a path's cost per token over a wider range of lengths.
func AnswerLengthUpTo(seed int64, prompt string, longest int) int {
	if longest < MinAnswer {
		longest = MaxAnswer
	}
	h := fnv.New64a()
	h.Write([]byte(prompt))
	return MinAnswer + int((h.Sum64()^uint64(seed))%uint64(longest-MinAnswer+1))
}

// Bounds of AnswerLength, and of a simulator's LongestAnswer setting (LongestAnswerLimit keeps an
// absurd setting from making a simulator generate without end).
const (
	MinAnswer          = 8
	MaxAnswer          = 39
	LongestAnswerLimit = 100_000
)

// CheckLongestAnswer says what is wrong with a simulator's LongestAnswer setting, if anything:
// 0 (MaxAnswer, the default) or MinAnswer to LongestAnswerLimit.
func CheckLongestAnswer(n int) error {
	if n != 0 && (n < MinAnswer || n > LongestAnswerLimit) {
		return fmt.Errorf("longest answer %d: want 0 (the default, %d tokens) or %d to %d tokens", n, MaxAnswer, MinAnswer, LongestAnswerLimit)
	}
	return nil
}

// ParseLongestAnswer reads a LongestAnswer setting from the environment variable name's value v.
func ParseLongestAnswer(name, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err == nil {
		err = CheckLongestAnswer(n)
	} else {
		err = fmt.Errorf("want a whole number of tokens")
	}
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return n, nil
}

func isPunct(w string) bool { return w == "." || w == "," || w == ";" }
