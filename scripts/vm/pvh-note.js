#!/usr/bin/env node
// Exit 0 when the file named by argv[2] is a 64-bit ELF kernel carrying the Xen PVH entry note
// (XEN_ELFNOTE_PHYS32_ENTRY), i.e. one qemu can boot directly with -kernel. Used by prepare.sh.
'use strict';

/* global require, process */
/* eslint-disable @typescript-eslint/no-require-imports */
const fs = require('fs');

const XEN_ELFNOTE_PHYS32_ENTRY = 18;
const PT_NOTE = 4;

function hasPvhNote(buf) {
  if (buf.length < 64 || buf.readUInt32BE(0) !== 0x7f454c46 || buf[4] !== 2 || buf[5] !== 1) {
    return false;
  }
  const phoff = Number(buf.readBigUInt64LE(32));
  const phentsize = buf.readUInt16LE(54);
  const phnum = buf.readUInt16LE(56);
  for (let i = 0; i < phnum; i++) {
    const ph = phoff + i * phentsize;
    if (buf.readUInt32LE(ph) !== PT_NOTE) continue;
    let off = Number(buf.readBigUInt64LE(ph + 8));
    const end = off + Number(buf.readBigUInt64LE(ph + 32));
    while (off + 12 <= end) {
      const namesz = buf.readUInt32LE(off);
      const descsz = buf.readUInt32LE(off + 4);
      const type = buf.readUInt32LE(off + 8);
      const name = buf.toString('latin1', off + 12, off + 12 + namesz).replace(/\0+$/, '');
      if (name === 'Xen' && type === XEN_ELFNOTE_PHYS32_ENTRY) return true;
      off += 12 + Math.ceil(namesz / 4) * 4 + Math.ceil(descsz / 4) * 4;
    }
  }
  return false;
}

try {
  process.exit(hasPvhNote(fs.readFileSync(process.argv[2])) ? 0 : 1);
} catch {
  process.exit(1);
}
