package web

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"sync"
)

// favicon is the dashboard's icon as an .ico file holding one 32x32 PNG:
// three bars of a queue, the last one short, on the brand's blue, drawn
// here so the repository holds no binary.
var favicon = sync.OnceValue(func() []byte {
	const size = 32
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	blue := color.NRGBA{0x23, 0x57, 0xc6, 0xff}
	white := color.NRGBA{0xff, 0xff, 0xff, 0xff}
	for y := range size {
		for x := range size {
			if inRounded(x, y, size, 6) {
				img.Set(x, y, blue)
			}
		}
	}
	for i, w := range []int{20, 20, 12} {
		for y := 8 + i*6; y < 12+i*6; y++ {
			for x := 6; x < 6+w; x++ {
				img.Set(x, y, white)
			}
		}
	}
	var p bytes.Buffer
	_ = png.Encode(&p, img)
	var ico bytes.Buffer
	// ICONDIR (reserved, type 1 = icon, one image), then its ICONDIRENTRY
	// (width, height, colours, reserved, planes, bits per pixel, size,
	// offset of the image data).
	_ = binary.Write(&ico, binary.LittleEndian, []uint16{0, 1, 1})
	ico.Write([]byte{size, size, 0, 0})
	_ = binary.Write(&ico, binary.LittleEndian, []uint16{1, 32})
	_ = binary.Write(&ico, binary.LittleEndian, []uint32{uint32(p.Len()), 6 + 16})
	ico.Write(p.Bytes())
	return ico.Bytes()
})

// inRounded reports whether (x, y) is inside a size-wide square with
// corners of radius r.
func inRounded(x, y, size, r int) bool {
	cx := min(max(x, r), size-1-r)
	cy := min(max(y, r), size-1-r)
	dx, dy := x-cx, y-cy
	return dx*dx+dy*dy <= r*r
}
