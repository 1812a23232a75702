/* The attention explorer's page (explorer.html), served at GET / by
 * http.c: one static file with its script inline (no build step, no CDN),
 * linked into the binary as it is (the assembler's .incbin; the Makefile
 * rebuilds this file when the page changes), NUL-terminated. */
__asm__(".section .rodata\n"
        ".global srv_explorer_html\n"
        ".type srv_explorer_html, @object\n"
        "srv_explorer_html:\n"
        ".incbin \"src/serve/explorer.html\"\n"
        ".byte 0\n"
        ".size srv_explorer_html, . - srv_explorer_html\n"
        ".previous\n");
