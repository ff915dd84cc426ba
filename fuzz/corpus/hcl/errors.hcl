a = [1 2]
b = { k 1 }
c = "unterminated
