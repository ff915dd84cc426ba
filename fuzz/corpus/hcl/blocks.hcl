job "j" {
  group "g" {
    task "t" { n = 1 }
    task "u" {}
  }
  meta { owner = "team-1" }
}
resource "gpu" "h200" { count = 8 }
telemetry { enabled = true }
telemetry { enabled = false }
x
"l"
{
}
