package config

import "reflect"

// Change is one configuration key whose value differs between the running
// configuration and a newly read one.
type Change struct {
	// Key is the key's path in the file, e.g. "replica.max_bytes_per_second".
	Key string
	// Live says the running agent takes the new value on at once; any other
	// change waits for a restart.
	Live bool
}

// isLive reports whether a running agent takes on a new value of the
// configuration field f at once: its struct tag says reload:"live", and
// agent's Agent.Reload applies it.
func isLive(f reflect.StructField) bool {
	return f.Tag.Get("reload") == "live"
}

// Diff lists the keys whose values differ between old and new, in the order
// of the configuration's sections. It never includes the values, which may
// be secrets.
func Diff(old, new *Config) []Change {
	var out []Change
	diffValues("", reflect.ValueOf(*old), reflect.ValueOf(*new), &out)
	return out
}

// diffValues walks two values of one struct type by their yaml keys.
func diffValues(prefix string, a, b reflect.Value, out *[]Change) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlKey(f)
		if name == "" {
			continue
		}
		key := prefix + name
		av, bv := a.Field(i), b.Field(i)
		if hasYAMLFields(f.Type) {
			diffValues(key+".", av, bv, out)
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			*out = append(*out, Change{Key: key, Live: isLive(f)})
		}
	}
}
