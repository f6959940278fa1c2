/**
 * A minimal MP4 (ftyp, moov with one avc1 track, 4 KB of mdat) whose sample tables declare
 * `samples` samples in one stts/stsc/stsz entry each: a few KB that make an unbounded demuxer build
 * an index entry per declared sample (86 M: ~2 GB and seconds of ffprobe). For decode-service tests.
 */
const u32 = (v: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v >>> 0);
  return b;
};
const u16 = (v: number): Buffer => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(v);
  return b;
};
const box = (type: string, ...content: Buffer[]): Buffer => {
  const body = Buffer.concat(content);
  return Buffer.concat([u32(8 + body.length), Buffer.from(type, "latin1"), body]);
};
const fullBox = (type: string, version: number, flags: number, ...content: Buffer[]): Buffer =>
  box(type, Buffer.from([version, (flags >> 16) & 255, (flags >> 8) & 255, flags & 255]), ...content);

export function sampleBombMp4(samples: number): Uint8Array {
  const matrix = Buffer.concat([0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000].map(u32));
  const stbl = (chunkOffset: number): Buffer => {
    const avcC = box("avcC", Buffer.from([1, 0x42, 0xc0, 0x0a, 0xff, 0xe0, 0x00]));
    const avc1 = box("avc1", Buffer.alloc(6), u16(1), Buffer.alloc(16), u16(64), u16(64), u32(0x480000), u32(0x480000), u32(0), u16(1), Buffer.alloc(32), u16(0x18), u16(0xffff), avcC);
    return box(
      "stbl",
      fullBox("stsd", 0, 0, u32(1), avc1),
      fullBox("stts", 0, 0, u32(1), u32(samples), u32(33)),
      fullBox("stsc", 0, 0, u32(1), u32(1), u32(samples), u32(1)),
      fullBox("stsz", 0, 0, u32(1), u32(samples)),
      fullBox("stco", 0, 0, u32(1), u32(chunkOffset)),
    );
  };
  const head = (chunkOffset: number): Buffer[] => {
    const mvhd = fullBox("mvhd", 0, 0, u32(0), u32(0), u32(1000), u32(samples), u32(0x10000), u16(0x100), Buffer.alloc(10), matrix, Buffer.alloc(24), u32(2));
    const tkhd = fullBox("tkhd", 0, 3, u32(0), u32(0), u32(1), u32(0), u32(samples), Buffer.alloc(8), u16(0), u16(0), u16(0), u16(0), matrix, u32(64 << 16), u32(64 << 16));
    const mdhd = fullBox("mdhd", 0, 0, u32(0), u32(0), u32(1000), u32(samples), u16(0x55c4), u16(0));
    const hdlr = fullBox("hdlr", 0, 0, u32(0), Buffer.from("vide"), Buffer.alloc(12), Buffer.from("v\0"));
    const minf = box("minf", fullBox("vmhd", 0, 1, Buffer.alloc(8)), box("dinf", fullBox("dref", 0, 0, u32(1), fullBox("url ", 0, 1))), stbl(chunkOffset));
    const moov = box("moov", mvhd, box("trak", tkhd, box("mdia", mdhd, hdlr, minf)));
    const ftyp = box("ftyp", Buffer.from("isom"), u32(512), Buffer.from("isomavc1"));
    return [ftyp, moov];
  };
  const [ftyp, moov] = head(0);
  const offset = ftyp!.length + moov!.length + 8;
  return new Uint8Array(Buffer.concat([...head(offset), box("mdat", Buffer.alloc(4096))]));
}
