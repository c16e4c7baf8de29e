package uploader

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateRefusesURLCredentials checks that a replica URL holding a
// user name or password is refused, whether it parses or not, and that no
// error quotes the URL.
func TestValidateRefusesURLCredentials(t *testing.T) {
	const secret = "Sup3rS3cretPW"
	tests := []struct {
		url  string
		want error
	}{
		{"s3://KEY:" + secret + "@bucket/prefix", ErrURLCredentials},
		{"s3://:" + secret + "@bucket", ErrURLCredentials},
		{"s3://" + secret + "@bucket", ErrURLCredentials},
		{"file://" + secret + "@/srv/replica", ErrURLCredentials},
		{"s3://KEY:" + secret + "@bucket:99x/%zz", ErrURLCredentials},
		{"s3://bucket/" + secret + "\x7f", ErrURLSyntax},
		{"ftp" + secret + "://bucket", ErrURLScheme},
		// An "@" in the path is not userinfo.
		{"s3://bucket/prefix@2024", nil},
		{"file:///srv/replica@x", nil},
	}
	for _, tc := range tests {
		c := Config{URL: tc.url, Site: "branch7"}
		err := c.Validate()
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("Validate(%q) = %v, want %v", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Validate(%q) error %q quotes the URL", tc.url, err)
		}
	}
	c := Config{URL: "s3://bucket", Site: "a/" + secret}
	if err := c.Validate(); !errors.Is(err, ErrSite) || strings.Contains(err.Error(), secret) {
		t.Errorf("Validate(site with a slash) = %v, want ErrSite without the site", err)
	}
}
