listener "tcp" {
  address = "127.0.0.1:8300"
  address = "x"
}
