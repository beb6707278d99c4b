package config

// parseSize reads a -z/-s/-f value the way upstream's
// sscanf(str, "%zu%c", ...) == 1 does, because scripts written against
// beanstalkd may rely on the odd corners of that:
//   - leading white space is skipped (" 12" is 12);
//   - one optional sign: "+5" is 5, and "-1" is 2^64-1 (strtoull negates
//     modulo 2^64), which for -z then clamps to the maximum;
//   - at least one decimal digit, and nothing at all after the digits
//     ("12 ", "12abc", "0x10" and "" are invalid);
//   - overflow saturates at 2^64-1 whatever the sign, as strtoull does.
func parseSize(s string) (uint64, bool) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var n uint64
	overflow := false
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if n > (1<<64-1-d)/10 {
			overflow = true
		}
		n = n*10 + d
	}
	if i == start || i != len(s) {
		return 0, false
	}
	switch {
	case overflow:
		return 1<<64 - 1, true
	case neg:
		return -n, true
	}
	return n, true
}

// isCSpace is C's isspace in the "C" locale.
func isCSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}
