// Checks a screenshot of the attention explorer (tests/scripts/serve_test.sh):
// the PNG decoded here (zlib from node, the five PNG row filters by hand),
// then the pixels of the heatmaps counted: the page draws weights as red
// (positive) and blue (negative) cells on white, and nothing else on it is
// coloured. Passes when enough map cells are there for every map drawn
// (DIFF's three and the Transformer's one); prints what it found.
//
// usage: node serve_page.mjs SCREENSHOT.png
import fs from "node:fs";
import zlib from "node:zlib";

const buf = fs.readFileSync(process.argv[2]);
if (buf.readUInt32BE(0) !== 0x89504e47) { console.log("not a PNG"); process.exit(1); }
let off = 8, width = 0, height = 0, depth = 0, colour = 0;
const idat = [];
while (off < buf.length) {
  const len = buf.readUInt32BE(off), type = buf.toString("latin1", off + 4, off + 8);
  const data = buf.subarray(off + 8, off + 8 + len);
  if (type === "IHDR") { width = data.readUInt32BE(0); height = data.readUInt32BE(4); depth = data[8]; colour = data[9]; }
  if (type === "IDAT") idat.push(data);
  off += 12 + len;
}
const channels = { 2: 3, 6: 4 }[colour];
if (depth !== 8 || !channels) { console.log(`unexpected PNG: depth ${depth}, colour type ${colour}`); process.exit(1); }
const raw = zlib.inflateSync(Buffer.concat(idat)), stride = width * channels;
const px = Buffer.alloc(height * stride);
for (let y = 0; y < height; y++) {
  const f = raw[y * (stride + 1)], src = y * (stride + 1) + 1;
  for (let x = 0; x < stride; x++) {
    const a = x >= channels ? px[y * stride + x - channels] : 0, b = y ? px[(y - 1) * stride + x] : 0;
    const c = x >= channels && y ? px[(y - 1) * stride + x - channels] : 0;
    const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
    const pred = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pc ? a : pb <= pc ? b : c][f];
    px[y * stride + x] = (raw[src + x] + pred) & 255;
  }
}
let red = 0, blue = 0;
for (let i = 0; i < height * stride; i += channels) {
  const r = px[i], g = px[i + 1], b = px[i + 2];
  if (r > 200 && Math.abs(g - b) < 8 && r - g > 20) red++;
  if (b > 200 && Math.abs(r - g) < 8 && b - r > 20) blue++;
}
// 4 maps of ~19 tokens, cells of 17 x 17 pixels: most of them visibly coloured,
// and A1 − λ·A2 has negative weights (blue) somewhere
const ok = red > 4 * 40 * 17 * 17 && blue > 0;
console.log(`${width}x${height}, ${red} red and ${blue} blue map pixels`);
process.exit(ok ? 0 : 1);
