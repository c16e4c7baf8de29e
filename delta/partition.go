package delta

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// hiveDefaultPartition is the directory name used for a null partition value.
const hiveDefaultPartition = "__HIVE_DEFAULT_PARTITION__"

// serializePartitionValue converts a Go value of a partition column to its
// string form in partitionValues (nil for null). Strings are kept as they
// are, numbers in decimal notation, booleans as "true"/"false", dates as
// yyyy-mm-dd, timestamps as ISO 8601 in UTC with microseconds
// ("2021-09-08T11:11:11.000000Z"), timestamp_ntz as
// "yyyy-mm-dd hh:mm:ss.ffffff", decimals with their full scale, and binary as
// its bytes. An empty string is null in Delta.
func serializePartitionValue(dt DataType, v any) (*string, error) {
	nv, err := types.Normalize(dt, v)
	if err != nil {
		return nil, err
	}
	if nv == nil {
		return nil, nil
	}
	var s string
	switch x := nv.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	case bool:
		s = strconv.FormatBool(x)
	case int8:
		s = strconv.FormatInt(int64(x), 10)
	case int16:
		s = strconv.FormatInt(int64(x), 10)
	case int32:
		s = strconv.FormatInt(int64(x), 10)
	case int64:
		s = strconv.FormatInt(x, 10)
	case float32:
		s = strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		s = strconv.FormatFloat(x, 'g', -1, 64)
	case Decimal:
		s = x.String()
	case time.Time:
		switch dt {
		case TypeDate:
			s = x.Format("2006-01-02")
		case TypeTimestamp:
			s = x.UTC().Format("2006-01-02T15:04:05.000000Z")
		default:
			s = x.Format("2006-01-02 15:04:05.000000")
		}
	default:
		return nil, fmt.Errorf("%w: %s cannot be a partition column", ErrInvalidSchema, dt)
	}
	if s == "" {
		return nil, nil
	}
	return &s, nil
}

// parsePartitionValue converts a partitionValues string (nil or empty for
// null) to the Go value of the column's type.
func parsePartitionValue(dt DataType, s *string) (any, error) {
	if s == nil || *s == "" {
		return nil, nil
	}
	v := *s
	bad := func(err error) error {
		return fmt.Errorf("%w: partition value %q for %s: %v", ErrInvalidValue, v, dt, err)
	}
	switch t := dt.(type) {
	case DecimalType:
		d, err := ParseDecimal(v)
		if err != nil {
			return nil, bad(err)
		}
		d, err = d.Rescale(int32(t.Scale))
		if err != nil {
			return nil, bad(err)
		}
		return d, nil
	case PrimitiveType:
		switch t {
		case TypeString:
			return v, nil
		case TypeBinary:
			return []byte(v), nil
		case TypeBoolean:
			b, err := strconv.ParseBool(strings.ToLower(v))
			if err != nil {
				return nil, bad(err)
			}
			return b, nil
		case TypeByte, TypeShort, TypeInteger, TypeLong:
			size := bitsFor(t)
			n, err := strconv.ParseInt(v, 10, size)
			if err != nil {
				return nil, bad(err)
			}
			return types.NormalizePrimitive(t, n)
		case TypeFloat:
			f, err := strconv.ParseFloat(v, 32)
			if err != nil {
				return nil, bad(err)
			}
			return float32(f), nil
		case TypeDouble:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, bad(err)
			}
			return f, nil
		case TypeDate:
			if len(v) > 10 {
				v = v[:10]
			}
			d, err := time.Parse("2006-01-02", v)
			if err != nil {
				return nil, bad(err)
			}
			return d, nil
		case TypeTimestamp, TypeTimestampNTZ:
			ts, err := parseTimestampString(v, t == TypeTimestamp)
			if err != nil {
				return nil, bad(err)
			}
			return ts, nil
		}
	}
	return nil, fmt.Errorf("%w: partition column of type %s", ErrUnsupportedFeature, dt)
}

// parseTimestampString parses the timestamp forms Delta writers use in
// partition values. Values without a zone are read as UTC.
func parseTimestampString(v string, withZone bool) (time.Time, error) {
	if withZone {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return TimeFromMicros(t.UnixMicro()), nil
		}
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return TimeFromMicros(t.UnixMicro()), nil
		}
	}
	return time.Time{}, fmt.Errorf("unknown timestamp format")
}

// escapePartitionPathPart escapes a partition column name or value for a
// directory name the way Hive and Spark do.
func escapePartitionPathPart(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte("\"#%'*/:=?\\{[]^", c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// partitionDir returns the relative directory of a file with the given
// partition values, such as "date=2024-01-02/region=eu".
func partitionDir(columns []string, values map[string]*string) string {
	parts := make([]string, len(columns))
	for i, c := range columns {
		v := hiveDefaultPartition
		if p := values[c]; p != nil {
			v = escapePartitionPathPart(*p)
		}
		parts[i] = partitionDirName(c) + "=" + v
	}
	return strings.Join(parts, "/")
}

// partitionDirName is the name a partition column has in directory names:
// escaped, without the leading "_" and "." that would hide the directory.
// The protocol keeps data files out of hidden directories, and Hadoop-style
// listers skip them; readers take partition values from the log, not from
// the path, so "_commit_date" is written under "commit_date=…".
func partitionDirName(column string) string {
	name := strings.TrimLeft(escapePartitionPathPart(column), "_.")
	if name == "" {
		return "p"
	}
	return name
}

// encodeLogPath turns a relative file path into the URI form stored in add
// and remove actions.
func encodeLogPath(rel string) string {
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// ResolvePath returns the local file path of an add or remove path: it is
// URI-decoded and, when relative, joined to the table root.
func ResolvePath(root, logPath string) (string, error) {
	if strings.HasPrefix(logPath, "file:") {
		u, err := url.Parse(logPath)
		if err != nil {
			return "", fmt.Errorf("resolve path %q: %w", logPath, err)
		}
		return u.Path, nil
	}
	if i := strings.Index(logPath, "://"); i > 0 && !strings.ContainsAny(logPath[:i], "/%") {
		return "", fmt.Errorf("%w: absolute path %q with a remote scheme", ErrUnsupportedFeature, logPath)
	}
	p, err := url.PathUnescape(logPath)
	if err != nil {
		return "", fmt.Errorf("resolve path %q: %w", logPath, err)
	}
	if strings.HasPrefix(p, "/") {
		return p, nil
	}
	return root + "/" + p, nil
}

// bitsFor is the bit size of an integer type.
func bitsFor(t PrimitiveType) int {
	switch t {
	case TypeByte:
		return 8
	case TypeShort:
		return 16
	case TypeInteger:
		return 32
	}
	return 64
}

// PartitionDir returns the relative directory of a data file with the given
// partition values (by column name), as this package writes it, such as
// "commit_date=2024-01-02" for the column _commit_date.
func PartitionDir(columns []string, values map[string]*string) string {
	return partitionDir(columns, values)
}
