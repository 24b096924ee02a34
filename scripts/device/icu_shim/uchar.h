/* Device-build stand-in for ICU's unicode/uchar.h: the H200 image has no ICU headers, and carrying
 * ICU's 30 MB data library would overflow the device tree limit. Only the declaration the tokenizer
 * uses is here; the matching libicuuc.so aborts if called, so nothing on the device can silently
 * tokenize differently (the device runs the engine, never the tokenizer tests). */
#pragma once
#include <stdint.h>
typedef int32_t UChar32;
typedef uint8_t UVersionInfo[4];
#ifdef __cplusplus
extern "C" {
#endif
void u_charAge(UChar32 c, UVersionInfo versionArray);
#ifdef __cplusplus
}
#endif
