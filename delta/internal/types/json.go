package types

import (
	"bytes"
	"encoding/json"
)

// OrderedObject is a JSON object that keeps the order of its keys, as the
// actions of the log and the stats of a file are written in Spark's order.
type OrderedObject struct {
	keys []string
	vals []any
}

// Add appends the key k with the value v.
func (o *OrderedObject) Add(k string, v any) {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

// Len returns the number of keys.
func (o *OrderedObject) Len() int { return len(o.keys) }

// MarshalJSON writes the keys in insertion order.
func (o *OrderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
