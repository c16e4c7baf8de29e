package types

import "errors"

// ErrUnsupportedFeature is returned (wrapped) when a table needs a protocol
// version or table feature that delta does not implement, such as deletion
// vectors, column mapping mode id or a reader version above 3, or a column has a type
// it cannot read or write.
var ErrUnsupportedFeature = errors.New("delta: unsupported table feature")

// ErrInvalidValue is returned (wrapped) by writers when a Go value does not fit
// the Delta type of its column, or a null is given for a non-nullable column.
var ErrInvalidValue = errors.New("delta: invalid value")

// ErrInvalidSchema is returned (wrapped) when a schema string cannot be parsed
// or a schema is not usable for the requested operation.
var ErrInvalidSchema = errors.New("delta: invalid schema")
