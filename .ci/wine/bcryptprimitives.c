/* ProcessPrng, which Rust's standard library calls on Windows for random
 * bytes (HashMap keys), is exported by bcryptprimitives.dll since Windows 10;
 * Wine 8.0 (Debian 12's) does not have it yet. This DLL gives it to the
 * Windows binary that .ci/platforms.sh runs under Wine, from RtlGenRandom,
 * which Wine has. It is a test fixture only: nothing the project ships. */
#include <windows.h>
#include <ntsecapi.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x7fffffff ? 0x7fffffff : (ULONG)len;
        if (!RtlGenRandom(data, n)) {
            return FALSE;
        }
        data += n;
        len -= n;
    }
    return TRUE;
}
