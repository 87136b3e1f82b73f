# scripts/embed.cmake - write a file's bytes as a C array, for files served as they are
# (the metrics actor's status page).  cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# defines `const char NAME[]` (the bytes and a NUL) and `const size_t NAME_len`.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* generated from ${IN} by scripts/embed.cmake: do not edit */\n"
  "#include <stddef.h>\n"
  "const char ${NAME}[] = {\n${bytes}0x00};\n"
  "const size_t ${NAME}_len = ${len};\n")
