s = "q\"b\\s\n\t\r \u00e9\U0001F600 ${var.x} %{ if y }z%{ endif } $${lit}"
t = "${f("}", {b = "\""})}"
i = -9223372036854775808
f = [1.5, -0.25, 1e3, 2.5E-3, 1e+2]
b = [true, false, null,]
o = { k = 1, "k2": "v"
  nested = { list = [[], {}, [{x = 1}]] } }
// line comment
/* block
   comment */
