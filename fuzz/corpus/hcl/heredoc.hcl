a = <<EOF
line1
  line2 ${x} \n
EOF
b = <<-EOT
    x
      y

    EOT
c = [<<EOF
z
EOF
, 2]
