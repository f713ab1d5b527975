#include "textflag.h"

// Each kernel computes, for one x row and four weight rows, the eight lane
// sums of dot.go's reduction order over n blocks of 8 elements: lane j of
// row r accumulates float32(x[8b+j]·w_r[8b+j]) for b = 0, 1, …, in order,
// starting from zero. VMULPS rounds each product to float32 and VADDPS adds
// it to the lane, exactly what the Go loops do (no FMA), so results are bit
// for bit those of the scalar code. The four rows are independent dependency
// chains, which hides the add latency.

// func dotBF16x4(x *float32, w0, w1, w2, w3 *uint16, n int, out *[32]float32)
TEXT ·dotBF16x4(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ n+40(FP), CX
	MOVQ out+48(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ bf16done

bf16loop:
	VMOVUPS (SI), Y4
	VPMOVZXWD (R8), Y5
	VPSLLD $16, Y5, Y5
	VMULPS Y4, Y5, Y5
	VADDPS Y5, Y0, Y0
	VPMOVZXWD (R9), Y6
	VPSLLD $16, Y6, Y6
	VMULPS Y4, Y6, Y6
	VADDPS Y6, Y1, Y1
	VPMOVZXWD (R10), Y7
	VPSLLD $16, Y7, Y7
	VMULPS Y4, Y7, Y7
	VADDPS Y7, Y2, Y2
	VPMOVZXWD (R11), Y8
	VPSLLD $16, Y8, Y8
	VMULPS Y4, Y8, Y8
	VADDPS Y8, Y3, Y3
	ADDQ $32, SI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $16, R10
	ADDQ $16, R11
	DECQ CX
	JNZ bf16loop

bf16done:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VZEROUPPER
	RET

// func dotF32x4(x, w0, w1, w2, w3 *float32, n int, out *[32]float32)
TEXT ·dotF32x4(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ n+40(FP), CX
	MOVQ out+48(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ f32done

f32loop:
	VMOVUPS (SI), Y4
	VMULPS (R8), Y4, Y5
	VADDPS Y5, Y0, Y0
	VMULPS (R9), Y4, Y6
	VADDPS Y6, Y1, Y1
	VMULPS (R10), Y4, Y7
	VADDPS Y7, Y2, Y2
	VMULPS (R11), Y4, Y8
	VADDPS Y8, Y3, Y3
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, R10
	ADDQ $32, R11
	DECQ CX
	JNZ f32loop

f32done:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VZEROUPPER
	RET

// func dotBF16x4r2(x0, x1 *float32, w0, w1, w2, w3 *uint16, n int, out *[64]float32)
// Two x rows against four weight rows: each decoded weight block serves
// both rows (verify passes have several rows). Lanes of x0 go to
// out[0:32], of x1 to out[32:64], row-major by weight row.
TEXT ·dotBF16x4r2(SB), NOSPLIT, $0-64
	MOVQ x0+0(FP), SI
	MOVQ x1+8(FP), DX
	MOVQ w0+16(FP), R8
	MOVQ w1+24(FP), R9
	MOVQ w2+32(FP), R10
	MOVQ w3+40(FP), R11
	MOVQ n+48(FP), CX
	MOVQ out+56(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ CX, CX
	JZ r2done

r2loop:
	VMOVUPS (SI), Y8
	VMOVUPS (DX), Y9
	VPMOVZXWD (R8), Y10
	VPSLLD $16, Y10, Y10
	VMULPS Y8, Y10, Y14
	VADDPS Y14, Y0, Y0
	VMULPS Y9, Y10, Y15
	VADDPS Y15, Y4, Y4
	VPMOVZXWD (R9), Y11
	VPSLLD $16, Y11, Y11
	VMULPS Y8, Y11, Y14
	VADDPS Y14, Y1, Y1
	VMULPS Y9, Y11, Y15
	VADDPS Y15, Y5, Y5
	VPMOVZXWD (R10), Y12
	VPSLLD $16, Y12, Y12
	VMULPS Y8, Y12, Y14
	VADDPS Y14, Y2, Y2
	VMULPS Y9, Y12, Y15
	VADDPS Y15, Y6, Y6
	VPMOVZXWD (R11), Y13
	VPSLLD $16, Y13, Y13
	VMULPS Y8, Y13, Y14
	VADDPS Y14, Y3, Y3
	VMULPS Y9, Y13, Y15
	VADDPS Y15, Y7, Y7
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $16, R10
	ADDQ $16, R11
	DECQ CX
	JNZ r2loop

r2done:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	VZEROUPPER
	RET
