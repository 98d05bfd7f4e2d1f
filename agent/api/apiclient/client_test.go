package apiclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

func TestClientErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/host":
			if r.Header.Get("Authorization") != "Bearer tok" {
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"error":{"code":"Unauthorized","message":"bad token"}}`)
				return
			}
			fmt.Fprint(w, `{"name":"pi","memory":{"total":100,"budget":60,"committed":10,"reserved":5},"future_field":1}`)
		case "/v1/placements/x":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, "no such thing")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	h, err := New(srv.URL, "tok").Host(ctx)
	require.NoError(t, err)
	assert.Equal(t, "pi", h.Name)
	assert.EqualValues(t, 45, h.Memory.Free())

	_, err = New(srv.URL, "wrong").Host(ctx)
	var apiErr *api.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, api.CodeUnauthorized, apiErr.Code)

	_, err = New(srv.URL, "tok").Placement(ctx, "x")
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, api.CodeNotFound, apiErr.Code)
	assert.Equal(t, "no such thing", apiErr.Message)

	addr := srv.Listener.Addr().String()
	srv.Close()
	_, err = New(addr, "tok").Host(ctx)
	var unreachable *UnreachableError
	assert.True(t, errors.As(err, &unreachable), "%v", err)
}

func TestChatStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{"Hel", "lo"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", c)
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"after done\"}}]}\n\n")
	}))
	t.Cleanup(srv.Close)
	var text strings.Builder
	var finish string
	var usage *ChatUsage
	err := New(srv.URL, "").ChatStream(context.Background(), "m", []ChatMessage{{Role: "user", Content: "hi"}}, ChatOptions{}, func(d ChatDelta) error {
		text.WriteString(d.Content)
		if d.FinishReason != "" {
			finish = d.FinishReason
		}
		if d.Usage != nil {
			usage = d.Usage
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "Hello", text.String())
	assert.Equal(t, "stop", finish)
	require.NotNil(t, usage)
	assert.Equal(t, 5, usage.TotalTokens)
}

// The gateway answers chat errors in OpenAI's shape with OpenAI's codes; the client reads them
// in the API's terms, so every front end treats "no such model" alike.
func TestOpenAIErrorCodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"message":"model \"x\" is not served in this mesh","type":"invalid_request_error","param":"model","code":"model_not_found"}}`)
	}))
	t.Cleanup(srv.Close)
	err := New(srv.URL, "").ChatStream(context.Background(), "x", nil, ChatOptions{}, func(ChatDelta) error { return nil })
	var apiErr *api.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, api.CodeNotFound, apiErr.Code)
	assert.Contains(t, apiErr.Message, "not served")
}
