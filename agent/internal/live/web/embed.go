// Package web holds the live view's page: plain HTML, JavaScript and CSS
// embedded in the binary. The page needs no network beyond the agent: it
// reads /api/v1/stream and /api/v1/status on its own origin.
package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
)

//go:embed index.html app.js style.css
var assets embed.FS

// csp allows the page's own scripts, styles and connections (the stream is
// a same-origin WebSocket) and nothing else.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page at / and its assets (/app.js, /style.css).
func Handler() http.Handler {
	etags := map[string]string{}
	fs.WalkDir(assets, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := assets.ReadFile(path); err == nil {
				sum := sha256.Sum256(b)
				etags["/"+path] = `"` + hex.EncodeToString(sum[:8]) + `"`
			}
		}
		return nil
	})
	etags["/"] = etags["/index.html"]
	files := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer") // the URL may hold a token
		h.Set("Content-Security-Policy", csp)
		if tag, ok := etags[r.URL.Path]; ok {
			h.Set("ETag", tag) // lets http.FileServer answer 304
		}
		files.ServeHTTP(w, r)
	})
}
