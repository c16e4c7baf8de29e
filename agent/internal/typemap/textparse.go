package typemap

import "time"

// The parsers here read the text PostgreSQL prints for the commonest values
// in the session's settings, far faster than pgtype's general ones and
// without allocating; whatever else they meet they leave to pgtype, which
// reads it or says why it cannot.

// parseBool reads t or f, which pgtype reads lowercased into a copy, as 1
// or 0.
func parseBool(src []byte) (int64, bool) {
	if len(src) == 1 {
		switch src[0] {
		case 't':
			return 1, true
		case 'f':
			return 0, true
		}
	}
	return 0, false
}

// parseIntegerIn returns parseInteger for integers between lo and hi.
func parseIntegerIn(lo, hi int64) func(src []byte) (int64, bool) {
	return func(src []byte) (int64, bool) {
		v, ok := parseInteger(src)
		return v, ok && v >= lo && v <= hi
	}
}

// parseISOTimestampOf returns parseISOTimestamp for timestamps with time
// zone (zone) or without.
func parseISOTimestampOf(zone bool) func(src []byte) (int64, bool) {
	return func(src []byte) (int64, bool) { return parseISOTimestamp(src, zone) }
}

// parseISOTimestamp reads the text PostgreSQL prints for a finite timestamp
// between the years 1 and 9999 in the session's settings (DateStyle ISO,
// TimeZone UTC): "2006-01-02 15:04:05", an optional fraction of up to six
// digits, then "+00" for a timestamptz (zone true). It returns the
// microseconds since 1970-01-01 00:00:00, and false for any other text
// (infinity, BC, a year past 9999, another offset, a malformed one): the
// caller's general parser then reads it, or says why it cannot. It does the
// one parse that pgtype does through time.Parse for every row, at a tenth of
// the cost and without allocating.
func parseISOTimestamp(src []byte, zone bool) (int64, bool) {
	n := len(src)
	if zone {
		if n < 22 || src[n-3] != '+' || src[n-2] != '0' || src[n-1] != '0' {
			return 0, false
		}
		n -= 3
	}
	if n < 19 || n == 20 || n > 26 || src[4] != '-' || src[7] != '-' || src[10] != ' ' || src[13] != ':' || src[16] != ':' {
		return 0, false
	}
	year, ok1 := digits(src[0:4])
	month, ok2 := digits(src[5:7])
	day, ok3 := digits(src[8:10])
	hour, ok4 := digits(src[11:13])
	minute, ok5 := digits(src[14:16])
	second, ok6 := digits(src[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || year < 1 || month < 1 || month > 12 ||
		day < 1 || day > daysInMonth(year, month) || hour > 23 || minute > 59 || second > 59 {
		return 0, false
	}
	var micros int64
	if n > 19 {
		if src[19] != '.' {
			return 0, false
		}
		frac, ok := digits(src[20:n])
		if !ok {
			return 0, false
		}
		for range 26 - n {
			frac *= 10
		}
		micros = frac
	}
	t := time.Date(int(year), time.Month(month), int(day), int(hour), int(minute), int(second), 0, time.UTC)
	return t.UnixMicro() + micros, true
}

// digits returns the number the ASCII digits b spell, and false if b holds
// anything else.
func digits(b []byte) (int64, bool) {
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// daysInMonth returns the days of a month of the proleptic Gregorian
// calendar.
func daysInMonth(year, month int64) int64 {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// parseInteger reads the text PostgreSQL prints for an integer of at most 18
// digits, with a minus sign when negative, and reports false for any other
// text (more digits, a plus sign, spaces).
func parseInteger(src []byte) (int64, bool) {
	neg := len(src) > 1 && src[0] == '-'
	if neg {
		src = src[1:]
	}
	if len(src) == 0 || len(src) > 18 {
		return 0, false
	}
	v, ok := digits(src)
	if neg {
		v = -v
	}
	return v, ok
}
