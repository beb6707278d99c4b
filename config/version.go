package config

// Version is beanpole's own version. It is what -v prints and what the
// server reports as `version` in stats; it deliberately does not pretend to
// be a beanstalkd release number, so clients can tell the two apart.
const Version = "0.1.0"
