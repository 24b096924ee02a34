/* See uchar.h: the device build's ICU stand-in; calling it is a bug, so it aborts loudly. */
#include <stdio.h>
#include <stdlib.h>
#include "unicode/uchar.h"
void u_charAge(UChar32 c, UVersionInfo v) {
  (void)c; (void)v;
  fprintf(stderr, "u_charAge called in a device build without ICU (scripts/device/icu_shim)\n");
  abort();
}
