package live

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCheckListenPortAndToken checks the port range and the token strength
// a non-loopback address needs, and that no error quotes the token.
func TestCheckListenPortAndToken(t *testing.T) {
	const strong = "0123456789abcdef"
	tests := []struct {
		listen, token string
		want          error
	}{
		{"127.0.0.1:8080", "", nil},
		{"127.0.0.1:65535", "", nil},
		{"0.0.0.0:8080", strong, nil},
		{"0.0.0.0:8080", "  " + strong + "\t", nil},
		{"127.0.0.1:99999", "", ErrBadPort},
		{"127.0.0.1:0", "", ErrBadPort},
		{"127.0.0.1:-1", "", ErrBadPort},
		{"127.0.0.1:http", "", ErrBadPort},
		{"0.0.0.0:65536", strong, ErrBadPort},
		{"0.0.0.0:8080", "", ErrTokenRequired},
		{"0.0.0.0:8080", " ", ErrWeakToken},
		{"0.0.0.0:8080", strings.Repeat(" ", 40), ErrWeakToken},
		{"0.0.0.0:8080", strong[1:], ErrWeakToken},
		{"0.0.0.0:8080", "   " + strong[1:] + "   ", ErrWeakToken},
		// A loopback server may have a short token: it is not required.
		{"127.0.0.1:8080", "x", nil},
	}
	for _, tc := range tests {
		err := CheckListen(Config{Listen: tc.listen, Token: tc.token})
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("CheckListen(%q, token %q) = %v, want %v", tc.listen, tc.token, err, tc.want)
		}
		if err != nil && strings.TrimSpace(tc.token) != "" && strings.Contains(err.Error(), strings.TrimSpace(tc.token)) {
			t.Errorf("CheckListen(%q) error %q quotes the token", tc.listen, err)
		}
	}
}

// TestAuthHidesQueryToken checks that a token given as ?token= is accepted
// but taken out of the request the handler sees, which therefore cannot log
// it, while the other parameters stay.
func TestAuthHidesQueryToken(t *testing.T) {
	const token = "query-token-0123456789"
	s := NewServer(Config{Listen: "127.0.0.1:8080", Token: token}, nil, nil, nil, nil)
	var seen *http.Request
	h := s.auth(func(w http.ResponseWriter, r *http.Request) { seen = r })
	for _, target := range []string{
		"/api/v1/status?token=" + token + "&limit=5",
		"/api/v1/status?limit=5&token=" + token,
	} {
		seen = nil
		w := httptest.NewRecorder()
		h(w, httptest.NewRequest("GET", target, nil))
		if w.Code != http.StatusOK || seen == nil {
			t.Fatalf("GET %s: status %d, handler called: %v", target, w.Code, seen != nil)
		}
		for what, text := range map[string]string{"URL": seen.URL.String(), "RequestURI": seen.RequestURI, "RawQuery": seen.URL.RawQuery} {
			if strings.Contains(text, token) {
				t.Errorf("GET %s: the handler sees the token in its %s %q", target, what, text)
			}
		}
		if got := seen.URL.Query().Get("limit"); got != "5" {
			t.Errorf("GET %s: limit = %q after the token was taken out, want 5", target, got)
		}
	}
	// A wrong token is refused, and a missing one too.
	for _, target := range []string{"/api/v1/status?token=wrong", "/api/v1/status"} {
		seen = nil
		w := httptest.NewRecorder()
		h(w, httptest.NewRequest("GET", target, nil))
		if w.Code != http.StatusUnauthorized || seen != nil {
			t.Errorf("GET %s: status %d, handler called: %v; want 401", target, w.Code, seen != nil)
		}
	}
}
